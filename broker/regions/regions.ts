/**
 * Row "reads and home region" (flag `ha.regions`, docs/multi-region.md): where this node's lag-tolerant list
 * reads go, and whether it leaves a mesh's single-authority work to the mesh's home region.
 *
 * Contract:
 * - `read` runs one list read of the table in docs/multi-region.md (`peers.list`, `stream.list`, `mcp.list`,
 *   `schedule.list`, `watch.list`, `audit.query`) and nothing else: never a claim, a lock, admission or a
 *   feed's read of its deliveries (those stay on the primary pool whatever the flag). Each read is counted in
 *   `mesh_broker_region_reads_total{pool}`.
 * - `defers(meshId, work)` says whether this node should *not try* the mesh's `work` now, because a live
 *   node of the mesh's home region is there to take it. It only steers who tries: the claims (the clock's
 *   advisory lock and epoch, the occurrence row, the watch lease) stay the fence, so a wrong or stale
 *   answer costs latency, never a second authority. `deferred(work)` lists those meshes for a claim query.
 *   `clock`: a live home-region node holds a session of the mesh (only nodes with sessions lead a clock);
 *   `background`: a live home-region node exists (schedule firing, watch polling).
 * Local: every read on the primary pool, nothing deferred (phases 0-3). Shared: reads on the read pool
 * (DATABASE_READ_URL), and the home-region rule.
 */
import type pg from 'pg';
import type { Lifecycle } from '../rows/lifecycle.js';

/** Single-authority work of a mesh that the home-region rule steers. */
export type AuthorityWork = 'clock' | 'background';

export interface Regions extends Lifecycle {
  read<R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<pg.QueryResult<R>>;
  defers(meshId: string, work: AuthorityWork): Promise<boolean>;
  deferred(work: AuthorityWork): Promise<string[]>;
}

/** What the list-reading implementations of other rows need of this row. */
export type ListReads = Pick<Regions, 'read'>;
/** What the single-authority implementations (clock, schedules, watches) need of this row. */
export type HomeRegionRule = Pick<Regions, 'defers' | 'deferred'>;

/** Which pool a read went to, as the metric labels it. */
export type ReadPoolLabel = 'primary' | 'replica';

/** List reads on `pool` (the primary): what a row uses when no regions view is given (tests, tools). */
export function primaryReads(pool: { query: ListReads['read'] }): ListReads {
  return { read: (text, values) => pool.query(text, values) };
}

/** Nothing deferred: every node tries every mesh's work (what a row uses when no regions view is given). */
export const NO_HOME_RULE: HomeRegionRule = {
  defers: async () => false,
  deferred: async () => [],
};
