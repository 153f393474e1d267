import type { Pool } from '../db/pool.js';
import type { Logger } from '../log.js';

/**
 * This node's row in `nodes`: registered at start, refreshed every interval, marked stopped at shutdown.
 * It is how the cluster (and `workbench status`) knows which nodes exist and which are alive.
 */
export class NodeHeartbeat {
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly nodeId: string,
    private readonly url: string,
    private readonly intervalMs: number,
    private readonly log: Logger,
    /** What the node reports about itself in its row (`info`): its environment and flag values. */
    private readonly info: () => object = () => ({}),
    /** REGION: the home-region rule counts live nodes per region (docs/multi-region.md). */
    private readonly region: string | null = null,
  ) {}

  async start(): Promise<void> {
    await this.pool.query(
      `INSERT INTO nodes (id, url, started_at, heartbeat_at, stopped_at, info, region) VALUES ($1, $2, now(), now(), NULL, $3, $4)
       ON CONFLICT (id) DO UPDATE SET url = excluded.url, started_at = now(), heartbeat_at = now(), stopped_at = NULL,
         info = excluded.info, region = excluded.region`,
      [this.nodeId, this.url, JSON.stringify(this.info()), this.region],
    );
    this.timer ??= setInterval(() => void this.beat(), this.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.pool
      .query('UPDATE nodes SET stopped_at = now() WHERE id = $1', [this.nodeId])
      .catch((error) => this.log.warn({ err: error }, 'could not mark the node stopped'));
  }

  /** Writes the row now (something the row reports changed), besides the regular beats. */
  beatNow(): void {
    if (this.timer) void this.beat();
  }

  private async beat(): Promise<void> {
    try {
      await this.pool.query('UPDATE nodes SET heartbeat_at = now(), info = $2, region = $3 WHERE id = $1', [
        this.nodeId,
        JSON.stringify(this.info()),
        this.region,
      ]);
    } catch (error) {
      this.log.warn({ err: error }, 'node heartbeat failed');
    }
  }
}
