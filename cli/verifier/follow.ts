/**
 * The independent audit verifier's loop (`workbench audit verify --follow`): a process of its own, reading
 * Postgres only, trusting no broker. Each pass reads, per mesh, only the rows from its verified level on,
 * at most MAX_ROWS_PER_PASS of them (what is left shows as lag); every `rescanMs` it walks each chain again
 * from genesis up to where the incremental walk got, because a rewrite of rows it already verified
 * (possible only with the append-only trigger disabled) cannot be seen by reading new rows.
 *
 * Neither can the deletion of the newest rows, nor a chain recomputed from a rewritten row on: what is
 * left verifies. So each pass also checks the checkpoint (per mesh, the seq and hash of the last row it
 * verified, kept outside the database: checkpoint.ts): the chain must still hold that row. A chain that no
 * longer does is a break that stays (the checkpoint does not move until an operator resolves it), and the
 * verified seq it exports never goes back.
 */
import { ChainWalker, type Finding } from '../../broker/audit/chain-walker.js';
import { AUDIT_COLUMNS, type AuditRow } from '../../broker/audit/verify.js';
import type { Pool } from '../../broker/db/pool.js';
import { type Checkpoint, writeCheckpoint } from './checkpoint.js';
import { checkCheckpoint } from './checkpoint-check.js';
import type { VerifierMetrics } from './metrics.js';
import { loadWalkers, saveProgress } from './progress.js';

const PAGE = 2000;

/**
 * At most this many rows per mesh per incremental pass. The walk pages, so memory is bounded by PAGE
 * anyway; this bounds a pass's time, so that a burst on one mesh does not hold back the other meshes, the
 * checkpoint, the progress table and the exported figures until it is all read. It is also what makes the
 * lag gauge mean something: a pass that stops here leaves rows unverified, and a verifier that cannot keep
 * up (more rows written per interval than this) shows a lag that grows, not just a slow pass.
 */
export const MAX_ROWS_PER_PASS = 10_000;

/** How a walk ended: at the chain's head (nothing left to read), or before it (the bound, or a young gap). */
type WalkEnd = 'head' | 'stopped';

export interface FollowOptions {
  pool: Pool;
  metrics: VerifierMetrics;
  /** Only this mesh (else every mesh with audit rows). */
  meshId?: string;
  /** A row beyond a missing seq is a break once it is this old (before that, the gap may be a commit in flight). */
  gapGraceMs: number;
  onFinding: (finding: Finding) => void;
  /** The checkpoint to keep (read at start); kept in memory only when there is no file. */
  checkpoint: Checkpoint;
  checkpointFile?: string;
}

export class AuditFollower {
  private walkers = new Map<string, ChainWalker>();
  private loaded = false;
  /** Meshes whose checkpoint break was already printed (the gauge says it on every scrape). */
  private reportedCheckpointBreaks = new Set<string>();
  private checkpointDirty = false;
  /**
   * Per mesh, the most forks any pass of this process (or, from audit_verifier_progress, any earlier run)
   * has known: forks_found_total counts only what goes beyond it, so a restart or a rescan that finds the
   * same forks again counts nothing.
   */
  private knownForks = new Map<string, number>();

  constructor(private readonly options: FollowOptions) {}

  /** One pass over every mesh: new rows only, or (rescan) every row from genesis. */
  async pass(kind: 'incremental' | 'rescan'): Promise<void> {
    const { pool, metrics } = this.options;
    try {
      if (!this.loaded) {
        this.walkers = await loadWalkers(pool, this.options.onFinding);
        for (const [meshId, walker] of this.walkers) this.knownForks.set(meshId, walker.forks);
        this.loaded = true;
      }
      for (const meshId of await this.meshIds()) {
        const walker =
          kind === 'rescan' || !this.walkers.has(meshId)
            ? new ChainWalker(meshId, kind === 'rescan' ? () => {} : this.options.onFinding)
            : this.walkers.get(meshId)!;
        const before = JSON.stringify(walker.state());
        const previous = this.walkers.get(meshId);
        // A rescan re-reads what the incremental walk verified (and no further: rows beyond it are the
        // next incremental pass's), so what it finds beyond that walk's counts was changed behind it.
        const end = await this.walk(
          walker,
          kind === 'rescan' && previous ? { upToSeq: previous.seq } : { maxRows: MAX_ROWS_PER_PASS },
        );
        if (kind === 'rescan') this.reportRescan(previous, walker);
        this.countNewForks(walker);
        // A rescan walks silently (it reports what is new itself); the walker kept for the next
        // incremental passes must report again.
        this.walkers.set(
          meshId,
          kind === 'rescan' ? new ChainWalker(meshId, this.options.onFinding, walker.state()) : walker,
        );
        if (JSON.stringify(walker.state()) !== before) await saveProgress(pool, walker);
        await this.keepCheckpoint(walker);
        await this.export(walker, end);
      }
      await this.saveCheckpoint();
      metrics.passes.inc({ kind });
      metrics.dbUp.set(1);
    } catch (error) {
      metrics.dbUp.set(0);
      throw error;
    }
  }

  /**
   * Reads the mesh's rows from the walker's level on, page by page, until the end, a gap or the limit: at
   * most `maxRows` rows, or the rows up to seq `upToSeq`.
   */
  private async walk(
    walker: ChainWalker,
    limit: { maxRows: number } | { upToSeq: number },
  ): Promise<WalkEnd> {
    let after: { seq: number; id: number } = { seq: walker.seq, id: 0 };
    let budget = 'maxRows' in limit ? limit.maxRows : Number.POSITIVE_INFINITY;
    const upToSeq = 'upToSeq' in limit ? limit.upToSeq : Number.MAX_SAFE_INTEGER;
    for (;;) {
      const page = Math.min(PAGE, budget);
      const { rows } = await this.options.pool.query<AuditRow>(
        `SELECT ${AUDIT_COLUMNS} FROM public.audit_log WHERE mesh_id = $1 AND (seq, id) > ($2, $3) AND seq <= $4
          ORDER BY seq, id LIMIT ${page}`,
        [walker.meshId, after.seq, after.id, upToSeq],
      );
      for (const row of rows) {
        const result = walker.step(row);
        if (result === 'gap') {
          if (Date.now() - row.createdAt.getTime() < this.options.gapGraceMs) return 'stopped';
          walker.skipGap(row);
        } else if (result === 'unlinked') {
          walker.linkLate(row, await this.rowsAt(walker.meshId, row.seq - 1));
        }
        after = { seq: row.seq, id: row.id };
      }
      budget -= rows.length;
      // A rescan's last page is the end of what it re-reads, not the chain's head.
      if (rows.length < page) return 'upToSeq' in limit ? 'stopped' : 'head';
      if (budget <= 0) return 'stopped';
    }
  }

  /** Every row at one level of the mesh's chain (an index probe on (mesh_id, seq)). */
  private async rowsAt(meshId: string, seq: number): Promise<AuditRow[]> {
    const { rows } = await this.options.pool.query<AuditRow>(
      `SELECT ${AUDIT_COLUMNS} FROM public.audit_log WHERE mesh_id = $1 AND seq = $2 ORDER BY id`,
      [meshId, seq],
    );
    return rows;
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

  /** Adds the forks beyond the most this mesh was known to have to forks_found_total. */
  private countNewForks(walker: ChainWalker): void {
    const known = this.knownForks.get(walker.meshId) ?? 0;
    // inc by 0 too: the series exists from the mesh's first pass, at 0 unless that pass found a fork.
    this.options.metrics.forksFound.inc({ mesh: walker.meshId }, Math.max(0, walker.forks - known));
    this.knownForks.set(walker.meshId, Math.max(known, walker.forks));
  }

  /**
   * Checks that the chain still holds the mesh's checkpoint, then moves the checkpoint up to the walker's
   * head. A checkpoint the chain no longer holds stays where it is: the break is reported until resolved.
   */
  private async keepCheckpoint(walker: ChainWalker): Promise<void> {
    const { checkpoint, metrics, onFinding, pool } = this.options;
    const mesh = walker.meshId;
    const entry = checkpoint.get(mesh);
    if (entry) {
      const verdict = await checkCheckpoint(pool, mesh, entry);
      metrics.checkpointBroken.set({ mesh }, verdict.holds ? 0 : 1);
      if (!verdict.holds) {
        if (!this.reportedCheckpointBreaks.has(mesh)) {
          this.reportedCheckpointBreaks.add(mesh);
          onFinding({ kind: 'break', meshId: mesh, seq: entry.seq, id: 0, reason: verdict.message });
        }
        return;
      }
      this.reportedCheckpointBreaks.delete(mesh);
    } else {
      metrics.checkpointBroken.set({ mesh }, 0);
    }
    if (walker.seq > (entry?.seq ?? 0)) {
      checkpoint.set(mesh, { seq: walker.seq, hash: walker.headHash });
      this.checkpointDirty = true;
    }
  }

  /** Writes the checkpoint file once per pass that moved it; a failed write is retried after the next. */
  private async saveCheckpoint(): Promise<void> {
    const { checkpoint, checkpointFile, metrics } = this.options;
    if (!this.checkpointDirty || checkpointFile === undefined) return;
    try {
      await writeCheckpoint(checkpointFile, checkpoint);
      this.checkpointDirty = false;
    } catch (error) {
      metrics.checkpointWriteFailures.inc();
      console.error(`audit verifier: checkpoint ${checkpointFile} not written: ${(error as Error).message}`);
    }
  }

  /**
   * Sets the mesh's gauges after its walk. The lag is the chain's head seq minus the verified seq: 0 when
   * the walk read up to the head; else one probe of audit_mesh_seq_idx (max(seq) of the mesh).
   */
  private async export(walker: ChainWalker, end: WalkEnd): Promise<void> {
    const { checkpoint, metrics, pool } = this.options;
    const mesh = walker.meshId;
    let lag = 0;
    if (end === 'stopped') {
      const head = await pool.query<{ seq: number | null }>(
        'SELECT max(seq)::int AS seq FROM public.audit_log WHERE mesh_id = $1',
        [mesh],
      );
      lag = Math.max(0, (head.rows[0]?.seq ?? 0) - walker.seq);
    }
    const checkpointSeq = checkpoint.get(mesh)?.seq ?? 0;
    const checkpointBroken = this.reportedCheckpointBreaks.has(mesh) ? 1 : 0;
    // What was verified stays verified: a walker behind the checkpoint (a rescan of a shortened chain, a
    // progress row moved back in the database) does not move the exported seq back.
    metrics.verifiedSeq.set({ mesh }, Math.max(walker.seq, checkpointSeq));
    metrics.checkpointSeq.set({ mesh }, checkpointSeq);
    metrics.lagRows.set({ mesh }, lag);
    // Counted with the broken rows too, so that whatever watches breaks (the dashboard) sees it.
    metrics.breaks.set({ mesh }, walker.breaks + checkpointBroken);
    metrics.forks.set({ mesh }, walker.forks);
  }

  /**
   * The meshes with audit rows and those the checkpoint knows. Those with rows: a loose index scan over
   * audit_mesh_seq_idx (one index probe per mesh), not a DISTINCT over the whole table every pass.
   */
  private async meshIds(): Promise<string[]> {
    if (this.options.meshId) return [this.options.meshId];
    // A mesh whose rows were all deleted has none left to find, but its checkpoint remembers it.
    return [...new Set([...(await this.meshesWithRows()), ...this.options.checkpoint.keys()])].sort();
  }

  private async meshesWithRows(): Promise<string[]> {
    const { rows } = await this.options.pool.query<{ meshId: string }>(
      `WITH RECURSIVE m AS (
         (SELECT mesh_id FROM public.audit_log ORDER BY mesh_id LIMIT 1)
         UNION ALL
         SELECT (SELECT a.mesh_id FROM public.audit_log a WHERE a.mesh_id > m.mesh_id ORDER BY a.mesh_id LIMIT 1)
           FROM m WHERE m.mesh_id IS NOT NULL
       )
       SELECT mesh_id AS "meshId" FROM m WHERE mesh_id IS NOT NULL`,
    );
    return rows.map((r) => r.meshId);
  }
}
