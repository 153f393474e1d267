/**
 * Leadership of mesh clocks through Postgres session advisory locks, all held on one dedicated
 * connection of this node (a lock lives and dies with its connection).
 *
 * - `acquire` is idempotent: a lock this node holds is not taken again (session locks stack, and a
 *   stacked lock would need as many unlocks).
 * - The connection is checked every `checkMs` with a statement, besides TCP keepalive; when it fails,
 *   every leadership is considered lost at once (`onLost`), and a new connection is made for later
 *   attempts. The old holder stepping down matters less than fencing: every tick is written with the
 *   leader's epoch and refused once the epoch moved on (see clock.shared.ts).
 * - Needs session pooling: behind PgBouncer in transaction mode, a session lock would be taken on one
 *   server connection and "released" on another.
 */
import pg from 'pg';
import type { Logger } from '../log.js';
import { planted } from '../plants.js';
import { PeriodicTask } from '../timing/periodic.js';

export class ClockLeadership {
  private client: pg.Client | undefined;
  private connecting: Promise<pg.Client> | undefined;
  private readonly held = new Set<string>();
  /** Armed once a connection exists: a statement on it every `checkMs`. */
  private readonly checker: PeriodicTask;
  private closed = false;

  constructor(
    private readonly databaseUrl: string,
    private readonly nodeId: string,
    checkMs: number,
    private readonly onLost: (meshIds: string[]) => void,
    private readonly log: Logger,
  ) {
    this.checker = new PeriodicTask({
      everyMs: checkMs,
      run: () => this.check(),
      onError: { log, message: 'clock lease connection check failed' },
    });
  }

  holds(meshId: string): boolean {
    return this.held.has(meshId);
  }

  /** Tries to lead the mesh's clock; true when this node holds the lock (now or already). */
  async acquire(meshId: string): Promise<boolean> {
    if (this.held.has(meshId)) return true;
    // PLANTED BUG (tests only): leads without the lock, so every node that asks leads at once.
    if (planted('clock-unfenced')) this.held.add(meshId);
    const client = await this.connection();
    const result = await client.query<{ ok: boolean }>(
      "SELECT pg_try_advisory_lock(hashtextextended('clock:' || $1, 0)) AS ok",
      [meshId],
    );
    if (result.rows[0]?.ok) this.held.add(meshId);
    return this.held.has(meshId);
  }

  async release(meshId: string): Promise<void> {
    if (!this.held.delete(meshId)) return;
    await this.client
      ?.query("SELECT pg_advisory_unlock(hashtextextended('clock:' || $1, 0))", [meshId])
      .catch((error) =>
        this.log.warn({ err: error, meshId }, 'clock unlock failed (the lock goes with the connection)'),
      );
  }

  /** Usable again after `close` (the row flipped back to shared): leadership loss is watched again. */
  open(): void {
    this.closed = false;
  }

  async close(): Promise<void> {
    this.closed = true;
    void this.checker.stop();
    for (const meshId of [...this.held]) {
      // Bounded: a failed unlock is fine, ending the connection releases every lock.
      await this.release(meshId);
    }
    await this.client?.end().catch(() => {});
    this.client = undefined;
  }

  private connection(): Promise<pg.Client> {
    if (this.client) return Promise.resolve(this.client);
    this.connecting ??= (async () => {
      const client = new pg.Client({
        connectionString: this.databaseUrl,
        keepAlive: true,
        keepAliveInitialDelayMillis: 1000,
        application_name: `mesh-broker:${this.nodeId}:clock-leases`,
        connectionTimeoutMillis: 3000,
      });
      client.on('error', (error) => this.lost(client, error));
      client.on('end', () => this.lost(client, new Error('connection ended')));
      await client.connect();
      this.client = client;
      this.checker.start();
      return client;
    })().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  private async check(): Promise<void> {
    const client = this.client;
    if (!client || this.held.size === 0) return;
    try {
      await client.query('SELECT 1');
    } catch (error) {
      this.lost(client, error as Error);
    }
  }

  private lost(client: pg.Client, error: Error): void {
    if (this.client !== client) return;
    this.client = undefined;
    client.end().catch(() => {});
    const lost = [...this.held];
    this.held.clear();
    if (this.closed) return;
    if (lost.length > 0)
      this.log.warn({ err: error, meshes: lost.length }, 'clock leases lost with their connection');
    this.onLost(lost);
  }
}
