import type pg from 'pg';
import type { Pool } from '../db/pool.js';
import type { Logger } from '../log.js';
import { PeriodicTask } from '../timing/periodic.js';
import type { AuthorityWork, Regions } from './regions.js';

export interface SharedRegionsOptions {
  /** The primary: where the home-region rule reads the nodes and the meshes' home regions. */
  primary: Pool;
  /** DATABASE_READ_URL's pool (the primary pool itself when it is unset). */
  reads: Pool;
  counted: () => void;
  /** This node's REGION; undefined: no region, so nothing is deferred (reads still use `reads`). */
  region: string | undefined;
  /** The home of a mesh whose `home_region` is null. */
  primaryRegion: string | undefined;
  /** A node whose heartbeat is older than this (or that marked itself stopped) is not alive. */
  nodeDeadMs: number;
  /** How often the home-region view is read again. */
  refreshMs: number;
  log: Logger;
}

interface HomeAlive {
  /** A live node of the home region. */
  node: boolean;
  /** A live node of the home region holding a connected session of the mesh. */
  session: boolean;
}

/**
 * `ha.regions` on: list reads on the read pool; and, for every mesh homed in another region, whether a live
 * node there can take its work, read from the primary every `refreshMs` (one query over the meshes homed
 * elsewhere, so the claim loops ask a map, not the database). Until the first read, and while the primary
 * cannot be read, the last answer stands (nothing deferred at first: availability first).
 */
export class SharedRegions implements Regions {
  private homes = new Map<string, HomeAlive>();
  private readonly refresher: PeriodicTask;

  constructor(private readonly options: SharedRegionsOptions) {
    this.refresher = new PeriodicTask({
      everyMs: options.refreshMs,
      run: () => this.refreshOnce(),
      onError: { log: options.log, message: 'home-region view refresh failed' },
    });
  }

  read<R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    this.options.counted();
    return this.options.reads.query<R>(text, values);
  }

  async defers(meshId: string, work: AuthorityWork): Promise<boolean> {
    const home = this.homes.get(meshId);
    return home !== undefined && (work === 'clock' ? home.session : home.node);
  }

  async deferred(work: AuthorityWork): Promise<string[]> {
    return [...this.homes]
      .filter(([, home]) => (work === 'clock' ? home.session : home.node))
      .map(([meshId]) => meshId);
  }

  async activate(): Promise<void> {
    if (this.options.region === undefined) return;
    await this.refresh();
    this.refresher.start();
  }

  async deactivate(): Promise<void> {
    await this.refresher.stop();
    this.homes = new Map();
  }

  async close(): Promise<void> {}

  /** Reads the view again now (also what the timer does); one read at a time. */
  refresh(): Promise<void> {
    return this.refresher.runNow();
  }

  private async refreshOnce(): Promise<void> {
    const { primary, region, primaryRegion, nodeDeadMs, log } = this.options;
    try {
      const result = await primary.query<{ meshId: string; node: boolean; session: boolean }>(
        `WITH homed AS (
           SELECT id, coalesce(home_region, $2::text) AS home FROM meshes
            WHERE coalesce(home_region, $2::text) IS NOT NULL AND coalesce(home_region, $2::text) <> $1::text),
         alive AS (
           SELECT id, region FROM nodes WHERE stopped_at IS NULL AND region IS NOT NULL
              AND heartbeat_at > now() - make_interval(secs => $3 / 1000.0))
         SELECT h.id AS "meshId", true AS node,
                EXISTS (SELECT 1 FROM presence p JOIN alive a ON a.id = p.node_id
                         WHERE p.mesh_id = h.id AND p.disconnected_at IS NULL AND a.region = h.home) AS session
           FROM homed h WHERE EXISTS (SELECT 1 FROM alive a WHERE a.region = h.home)`,
        [region, primaryRegion ?? null, nodeDeadMs],
      );
      this.homes = new Map(result.rows.map(({ meshId, node, session }) => [meshId, { node, session }]));
    } catch (error) {
      log.warn({ err: error }, 'home-region view not read; the last one stands');
    }
  }
}
