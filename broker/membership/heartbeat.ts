import type { Pool } from '../db/pool.js';
import type { Logger } from '../log.js';
import { PeriodicTask } from '../timing/periodic.js';

const BEAT_FAILED = 'node heartbeat failed';

/**
 * This node's row in `nodes`: registered at start, refreshed every interval, marked stopped at shutdown.
 * It is how the cluster (and `workbench status`) knows which nodes exist and which are alive.
 */
export class NodeHeartbeat {
  private readonly beats: PeriodicTask;

  constructor(
    private readonly pool: Pool,
    private readonly nodeId: string,
    private readonly url: string,
    intervalMs: number,
    private readonly log: Logger,
    /** What the node reports about itself in its row (`info`): its environment and flag values. */
    private readonly info: () => object = () => ({}),
    /** REGION: the home-region rule counts live nodes per region (docs/multi-region.md). */
    private readonly region: string | null = null,
  ) {
    // A beat still running when the next is due is not doubled (the next one carries the same news).
    this.beats = new PeriodicTask({
      everyMs: intervalMs,
      run: () => this.beat(),
      onError: { log, message: BEAT_FAILED },
    });
  }

  async start(): Promise<void> {
    await this.pool.query(
      `INSERT INTO nodes (id, url, started_at, heartbeat_at, stopped_at, info, region) VALUES ($1, $2, now(), now(), NULL, $3, $4)
       ON CONFLICT (id) DO UPDATE SET url = excluded.url, started_at = now(), heartbeat_at = now(), stopped_at = NULL,
         info = excluded.info, region = excluded.region`,
      [this.nodeId, this.url, JSON.stringify(this.info()), this.region],
    );
    this.beats.start();
  }

  async stop(): Promise<void> {
    void this.beats.stop();
    await this.pool
      .query('UPDATE nodes SET stopped_at = now() WHERE id = $1', [this.nodeId])
      .catch((error) => this.log.warn({ err: error }, 'could not mark the node stopped'));
  }

  /** Writes the row now (something the row reports changed), besides the regular beats. */
  beatNow(): void {
    // Not joined to a beat in flight: that one may carry the row's previous info.
    if (this.beats.running) void this.beat().catch((error) => this.log.warn({ err: error }, BEAT_FAILED));
  }

  private async beat(): Promise<void> {
    await this.pool.query('UPDATE nodes SET heartbeat_at = now(), info = $2, region = $3 WHERE id = $1', [
      this.nodeId,
      JSON.stringify(this.info()),
      this.region,
    ]);
  }
}
