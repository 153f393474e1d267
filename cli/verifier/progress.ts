/**
 * The verifier's memory of how far it got, per mesh, in `audit_verifier_progress`: the verified level and
 * the hash of its head row, plus the breaks and forks found so far. Only the verifier writes it.
 */

import { GENESIS } from '../../broker/audit/chain.js';
import { ChainWalker, type Finding } from '../../broker/audit/chain-walker.js';
import type { Pool } from '../../broker/db/pool.js';

interface ProgressRow {
  meshId: string;
  verifiedSeq: number;
  verifiedHash: string;
  breaks: number;
  forks: number;
}

export async function saveProgress(pool: Pool, walker: ChainWalker): Promise<void> {
  await pool.query(
    `INSERT INTO public.audit_verifier_progress (mesh_id, verified_seq, verified_hash, breaks, forks, updated_at)
     VALUES ($1, $2, $3, $4, $5, now())
     ON CONFLICT (mesh_id) DO UPDATE SET verified_seq = excluded.verified_seq,
       verified_hash = excluded.verified_hash, breaks = excluded.breaks, forks = excluded.forks,
       updated_at = now()`,
    [walker.meshId, walker.seq, walker.headHash, walker.breaks, walker.forks],
  );
}

/**
 * Walkers positioned where the last run stopped. The head level is rebuilt from the rows at it and one
 * below (they were verified then); a remembered head hash that is no longer among them means the head
 * row was rewritten since, which is a break.
 */
export async function loadWalkers(
  pool: Pool,
  onFinding: (finding: Finding) => void,
): Promise<Map<string, ChainWalker>> {
  const walkers = new Map<string, ChainWalker>();
  const saved = await pool.query<ProgressRow>(
    `SELECT mesh_id AS "meshId", verified_seq AS "verifiedSeq", verified_hash AS "verifiedHash", breaks, forks
       FROM public.audit_verifier_progress`,
  );
  for (const row of saved.rows) {
    const levels = await pool.query<{ id: number; seq: number; hash: string }>(
      'SELECT id, seq, hash FROM public.audit_log WHERE mesh_id = $1 AND seq IN ($2, $3) ORDER BY seq, id',
      [row.meshId, row.verifiedSeq - 1, row.verifiedSeq],
    );
    const head = levels.rows.filter((r) => r.seq === row.verifiedSeq);
    const below = levels.rows.filter((r) => r.seq === row.verifiedSeq - 1);
    let breaks = row.breaks;
    const rewritten = row.verifiedSeq > 0 && !head.some((r) => r.hash === row.verifiedHash);
    if (rewritten) {
      breaks++;
      onFinding({
        kind: 'break',
        meshId: row.meshId,
        seq: row.verifiedSeq,
        id: head[0]?.id ?? 0,
        reason: 'the verified head row was rewritten or removed since the last run',
      });
    }
    walkers.set(
      row.meshId,
      new ChainWalker(row.meshId, onFinding, {
        seq: row.verifiedSeq,
        heads: rewritten ? [row.verifiedHash] : head.map((r) => r.hash),
        parents: row.verifiedSeq <= 1 ? [GENESIS] : below.map((r) => r.hash),
        seenIds: head.map((r) => r.id),
        breaks,
        forks: row.forks,
      }),
    );
  }
  return walkers;
}
