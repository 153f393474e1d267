/**
 * Who owns what in the cluster, read from Postgres: clock leaders, watch owners, schedule occurrences
 * fired in the last hour and the active lease, plus audit chain integrity. Shared by `workbench status`
 * and the console.
 */
import { verifyMesh } from '../../broker/audit/verify.js';
import type { Pool } from '../../broker/db/pool.js';

export interface Count {
  node: string | null;
  n: number;
}

export interface Ownership {
  clockLeaders: Count[];
  watchOwners: Count[];
  scheduleOccurrencesLastHour: Count[];
  activeLease: { holder: string; epoch: number; live: boolean } | null;
}

export interface Chains {
  intact: number;
  broken: string[];
}

export async function readOwnership(pool: Pool): Promise<Ownership> {
  const count = async (sql: string) => (await pool.query<Count>(sql)).rows;
  const [clockLeaders, watchOwners, scheduleOccurrencesLastHour, lease] = await Promise.all([
    count(
      `SELECT leader_node AS node, count(*)::int AS n FROM mesh_clocks
        WHERE updated_at > now() - interval '1 minute' AND NOT paused GROUP BY 1 ORDER BY 1`,
    ),
    count(
      'SELECT owner_node AS node, count(*)::int AS n FROM watches WHERE deleted_at IS NULL GROUP BY 1 ORDER BY 1',
    ),
    count(
      `SELECT node_id AS node, count(*)::int AS n FROM schedule_occurrences
        WHERE fired_at > now() - interval '1 hour' GROUP BY 1 ORDER BY 1`,
    ),
    pool.query<{ holder: string; epoch: number; live: boolean }>(
      "SELECT holder, epoch, expires_at > now() AS live FROM cluster_leases WHERE name = 'active'",
    ),
  ]);
  return { clockLeaders, watchOwners, scheduleOccurrencesLastHour, activeLease: lease.rows[0] ?? null };
}

/** Every mesh's chain walked from genesis (the console does it less often than it polls the nodes). */
export async function readChains(pool: Pool): Promise<Chains> {
  const meshes = (await pool.query<{ meshId: string }>('SELECT DISTINCT mesh_id AS "meshId" FROM audit_log'))
    .rows;
  let intact = 0;
  const broken: string[] = [];
  for (const { meshId } of meshes) {
    if ((await verifyMesh(pool, meshId)).valid) intact++;
    else broken.push(meshId);
  }
  return { intact, broken };
}
