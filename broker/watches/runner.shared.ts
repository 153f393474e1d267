import type { Pool } from '../db/pool.js';
import type { Logger } from '../log.js';
import { type HomeRegionRule, NO_HOME_RULE } from '../regions/regions.js';
import { PeriodicTask } from '../timing/periodic.js';
import type { WatchPoller } from './poller.js';
import type { WatchRunner } from './runner.js';
import { WATCH_COLUMNS, type Watch } from './store.js';

export interface SharedWatchRunnerOptions {
  pool: Pool;
  poller: WatchPoller;
  nodeId: string;
  /** How long an owner's lease lasts; renewed every third of it. */
  leaseMs: number;
  /** Nodes whose heartbeat is older than this are not counted when sharing watches out. */
  nodeDeadMs: number;
  /**
   * The home-region rule (`ha.regions`): watches of the meshes it defers are given back and not adopted
   * here (the home region's nodes take them); default: nothing deferred.
   */
  homeRule?: HomeRegionRule;
  log: Logger;
}

/**
 * Watch ownership across nodes (flag `ha.watches`). Each live watch is owned by one node through a lease
 * (`owner_node`, `lease_until`) and polled only by its owner. Every third of a lease, each node:
 * 1. renews the leases of the watches it owns; a watch deleted on any node, taken over, or whose member
 *    was revoked is no longer returned, and its polling stops here (each poll also checks its row);
 * 2. gives back watches above its fair share (total / live nodes, rounded up), so ownership balances;
 * 3. adopts orphans (no owner, or a lease that ran out: a dead or drained node's) up to its fair share,
 *    with `FOR UPDATE SKIP LOCKED` so two nodes never adopt the same watch.
 * A watch belongs to its member, not to a session: it survives its creator reconnecting anywhere and its
 * owner node dying (adopted within a lease). Bound: an orphan is polled again within leaseMs + leaseMs/3.
 */
export class SharedWatchRunner implements WatchRunner {
  /** Lease rounds, every third of the lease; running while this node runs watches. */
  private readonly rounds: PeriodicTask;
  /** What this node polled when it last stopped: the local runner polls those on a flip back. */
  handedBack: Watch[] = [];

  constructor(private readonly options: SharedWatchRunnerOptions) {
    this.rounds = new PeriodicTask({
      everyMs: Math.max(100, options.leaseMs / 3),
      run: () => this.rebalanceOnce(),
      onError: { log: options.log, message: 'watch lease round failed; the next one retries' },
    });
  }

  async activate(): Promise<void> {
    this.rounds.start();
    void this.rebalance();
  }

  /** Stops polling and gives the leases back at once (others adopt them at their next round). */
  async deactivate(): Promise<void> {
    await this.rounds.stop();
    this.handedBack = this.options.poller.watches();
    this.options.poller.stopAll();
    await this.options.pool
      .query('UPDATE watches SET owner_node = NULL, lease_until = NULL WHERE owner_node = $1', [
        this.options.nodeId,
      ])
      .catch((error) => this.options.log.warn({ err: error }, 'could not give watch leases back'));
  }

  created(watch: Watch): void {
    // Not running watches here (a standby): the row is an orphan for the runner that is to adopt it.
    if (!this.rounds.running) return;
    // The creating node owns a new watch first (store.create wrote owner_node), if nobody adopted it.
    void this.options.pool
      .query(
        `UPDATE watches SET lease_until = now() + make_interval(secs => $2 / 1000.0)
          WHERE id = $1 AND owner_node = $3 AND deleted_at IS NULL RETURNING id`,
        [watch.watchId, this.options.leaseMs, this.options.nodeId],
      )
      .then((result) => {
        if (result.rowCount && this.rounds.running) this.options.poller.start(watch);
      })
      .catch((error) => this.options.log.warn({ err: error }, 'could not lease a new watch'));
  }

  deleted(watchId: string): void {
    this.options.poller.stop(watchId);
  }

  async sessionEnded(): Promise<void> {} // watches outlive sessions here

  async close(): Promise<void> {}

  rebalance(): Promise<void> {
    return this.rounds.runNow();
  }

  private async rebalanceOnce(): Promise<void> {
    const { pool, poller, nodeId, leaseMs, nodeDeadMs } = this.options;
    try {
      const deferred = await (this.options.homeRule ?? NO_HOME_RULE).deferred('background');
      if (deferred.length > 0) {
        await pool.query(
          'UPDATE watches SET owner_node = NULL, lease_until = NULL WHERE owner_node = $1 AND mesh_id = ANY ($2::uuid[])',
          [nodeId, deferred],
        );
      }
      const renewed = await pool.query<Watch>(
        `UPDATE watches w SET lease_until = now() + make_interval(secs => $2 / 1000.0)
           FROM members m
          WHERE m.id = w.member_id AND w.owner_node = $1 AND w.deleted_at IS NULL AND m.revoked_at IS NULL
          RETURNING ${WATCH_COLUMNS}`,
        [nodeId, leaseMs],
      );
      const mine = new Set(renewed.rows.map((r) => r.watchId));
      for (const id of poller.ids()) if (!mine.has(id)) poller.stop(id);
      // Owned here but not polled (created while the row was local, or before a restart): poll them.
      for (const watch of renewed.rows) poller.start(watch);

      // With meshes deferred to their home region, this node shares what it may take with the nodes of its
      // own region (each region covers what it may take, so nothing is left unowned; the unhomed watches
      // may then sit unevenly, never orphaned). Otherwise: every watch over every live node, as before.
      const counts = await pool.query<{ total: number; nodes: number }>(
        `SELECT (SELECT count(*)::int FROM watches WHERE deleted_at IS NULL AND mesh_id <> ALL ($3::uuid[])) AS total,
                (SELECT count(*)::int FROM nodes WHERE stopped_at IS NULL
                    AND heartbeat_at > now() - make_interval(secs => $1 / 1000.0)
                    AND (cardinality($3::uuid[]) = 0
                         OR region IS NOT DISTINCT FROM (SELECT region FROM nodes WHERE id = $2))) AS nodes`,
        [nodeDeadMs, nodeId, deferred],
      );
      const { total, nodes } = counts.rows[0]!;
      const share = Math.ceil(total / Math.max(1, nodes));

      if (mine.size > share) {
        const excess = [...mine].slice(share);
        await pool.query(
          'UPDATE watches SET owner_node = NULL, lease_until = NULL WHERE id = ANY ($1::uuid[]) AND owner_node = $2',
          [excess, nodeId],
        );
        for (const id of excess) poller.stop(id);
        return;
      }
      const need = share - mine.size;
      if (need <= 0) return;
      const adopted = await pool.query<Watch>(
        `WITH picked AS (
           SELECT id FROM watches
            WHERE deleted_at IS NULL AND (owner_node IS NULL OR lease_until IS NULL OR lease_until < now())
              AND mesh_id <> ALL ($4::uuid[])
            ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED)
         UPDATE watches w SET owner_node = $1, lease_until = now() + make_interval(secs => $2 / 1000.0)
           FROM picked, members m
          WHERE w.id = picked.id AND m.id = w.member_id AND m.revoked_at IS NULL
          RETURNING ${WATCH_COLUMNS}`,
        [nodeId, leaseMs, need, deferred],
      );
      for (const watch of adopted.rows) poller.start(watch);
    } catch (error) {
      this.options.log.warn({ err: error }, 'watch lease round failed; the next one retries');
    }
  }
}
