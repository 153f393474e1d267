/**
 * The independent audit verifier's loop (`workbench audit verify --follow`): a process of its own, reading
 * Postgres only, trusting no broker. Each pass reads, per mesh, only the rows from its verified level on;
 * every `rescanMs` it walks each chain again from genesis, because a rewrite of rows it already verified
 * (possible only with the append-only trigger disabled) cannot be seen by reading new rows.
 */
import { ChainWalker, type Finding } from '../../broker/audit/chain-walker.js';
import { AUDIT_COLUMNS, type AuditRow } from '../../broker/audit/verify.js';
import type { Pool } from '../../broker/db/pool.js';
import type { VerifierMetrics } from './metrics.js';
import { loadWalkers, saveProgress } from './progress.js';

const PAGE = 2000;

export interface FollowOptions {
  pool: Pool;
  metrics: VerifierMetrics;
  /** Only this mesh (else every mesh with audit rows). */
  meshId?: string;
  /** A row beyond a missing seq is a break once it is this old (before that, the gap may be a commit in flight). */
  gapGraceMs: number;
  onFinding: (finding: Finding) => void;
}

export class AuditFollower {
  private walkers = new Map<string, ChainWalker>();
  private loaded = false;

  constructor(private readonly options: FollowOptions) {}

  /** One pass over every mesh: new rows only, or (rescan) every row from genesis. */
  async pass(kind: 'incremental' | 'rescan'): Promise<void> {
    const { pool, metrics } = this.options;
    try {
      if (!this.loaded) {
        this.walkers = await loadWalkers(pool, this.options.onFinding);
        this.loaded = true;
      }
      for (const meshId of await this.meshIds()) {
        const walker =
          kind === 'rescan' || !this.walkers.has(meshId)
            ? new ChainWalker(meshId, kind === 'rescan' ? () => {} : this.options.onFinding)
            : this.walkers.get(meshId)!;
        const before = JSON.stringify(walker.state());
        await this.walk(walker);
        if (kind === 'rescan') this.reportRescan(this.walkers.get(meshId), walker);
        // A rescan walks silently (it reports what is new itself); the walker kept for the next
        // incremental passes must report again.
        this.walkers.set(
          meshId,
          kind === 'rescan' ? new ChainWalker(meshId, this.options.onFinding, walker.state()) : walker,
        );
        if (JSON.stringify(walker.state()) !== before) await saveProgress(pool, walker);
        await this.export(walker);
      }
      metrics.passes.inc({ kind });
      metrics.dbUp.set(1);
    } catch (error) {
      metrics.dbUp.set(0);
      throw error;
    }
  }

  /** Reads the mesh's rows from the walker's level on, page by page, until the end or a gap. */
  private async walk(walker: ChainWalker): Promise<void> {
    let after: { seq: number; id: number } = { seq: walker.seq, id: 0 };
    for (;;) {
      const { rows } = await this.options.pool.query<AuditRow>(
        `SELECT ${AUDIT_COLUMNS} FROM audit_log WHERE mesh_id = $1 AND (seq, id) > ($2, $3)
          ORDER BY seq, id LIMIT ${PAGE}`,
        [walker.meshId, after.seq, after.id],
      );
      for (const row of rows) {
        if (walker.step(row) === 'gap') {
          if (Date.now() - row.createdAt.getTime() < this.options.gapGraceMs) return;
          walker.skipGap(row);
        }
        after = { seq: row.seq, id: row.id };
      }
      if (rows.length < PAGE) return;
    }
  }

  /** A rescan that finds more than the incremental walk knew: say what (the rewrite of old rows). */
  private reportRescan(previous: ChainWalker | undefined, fresh: ChainWalker): void {
    if (!previous) return;
    if (fresh.breaks > previous.breaks || fresh.forks > previous.forks) {
      this.options.onFinding({
        kind: fresh.breaks > previous.breaks ? 'break' : 'fork',
        meshId: fresh.meshId,
        seq: fresh.seq,
        id: 0,
        reason: `rescan from genesis: ${fresh.breaks} broken rows and ${fresh.forks} forks (the incremental walk knew ${previous.breaks} and ${previous.forks}): rows already verified were changed`,
      });
    }
  }

  private async export(walker: ChainWalker): Promise<void> {
    const { metrics, pool } = this.options;
    const mesh = walker.meshId;
    const lag = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM audit_log WHERE mesh_id = $1 AND seq > $2',
      [mesh, walker.seq],
    );
    metrics.verifiedSeq.set({ mesh }, walker.seq);
    metrics.lagRows.set({ mesh }, lag.rows[0]?.n ?? 0);
    metrics.breaks.set({ mesh }, walker.breaks);
    metrics.forks.set({ mesh }, walker.forks);
  }

  /**
   * The meshes with audit rows: a loose index scan over audit_mesh_seq_idx (one index probe per mesh),
   * not a DISTINCT over the whole table every pass.
   */
  private async meshIds(): Promise<string[]> {
    if (this.options.meshId) return [this.options.meshId];
    const { rows } = await this.options.pool.query<{ meshId: string }>(
      `WITH RECURSIVE m AS (
         (SELECT mesh_id FROM audit_log ORDER BY mesh_id LIMIT 1)
         UNION ALL
         SELECT (SELECT a.mesh_id FROM audit_log a WHERE a.mesh_id > m.mesh_id ORDER BY a.mesh_id LIMIT 1)
           FROM m WHERE m.mesh_id IS NOT NULL
       )
       SELECT mesh_id AS "meshId" FROM m WHERE mesh_id IS NOT NULL`,
    );
    return rows.map((r) => r.meshId);
  }
}
