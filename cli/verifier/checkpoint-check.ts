/**
 * Does the chain in the database still hold the verifier's checkpoint? The row the checkpoint names must
 * be there, at its seq, with its hash. If the chain ends before it, its newest rows were deleted; if the row
 * at that seq has another hash (or is missing while later rows exist), the chain was rewritten up to it.
 * Either way the rest of the chain may verify perfectly, which is why only the checkpoint can tell.
 */
import type { Pool } from '../../broker/db/pool.js';
import type { CheckpointEntry } from './checkpoint.js';

export type CheckpointVerdict =
  | { holds: true }
  | {
      holds: false;
      problem: 'shorter' | 'diverged';
      /** The chain's newest row now (none: the mesh has no rows left) and the hashes at the checkpoint's seq. */
      found: { head?: { seq: number; hash: string }; hashesAtSeq: string[] };
      message: string;
    };

export async function checkCheckpoint(
  pool: Pool,
  meshId: string,
  checkpoint: CheckpointEntry,
): Promise<CheckpointVerdict> {
  const { rows } = await pool.query<{
    headSeq: number | null;
    headHash: string | null;
    hashesAtSeq: string[];
  }>(
    `SELECT head.seq AS "headSeq", head.hash AS "headHash",
            ARRAY(SELECT hash FROM public.audit_log WHERE mesh_id = $1 AND seq = $2 ORDER BY id) AS "hashesAtSeq"
       FROM (SELECT 1) one
       LEFT JOIN LATERAL (SELECT seq, hash FROM public.audit_log WHERE mesh_id = $1 ORDER BY seq DESC, id DESC LIMIT 1)
         head ON true`,
    [meshId, checkpoint.seq],
  );
  const { headSeq, headHash, hashesAtSeq } = rows[0]!;
  if (hashesAtSeq.includes(checkpoint.hash)) return { holds: true };
  const head = headSeq !== null && headHash !== null ? { seq: headSeq, hash: headHash } : undefined;
  const found = { ...(head ? { head } : {}), hashesAtSeq };
  const expected = `the checkpoint says seq ${checkpoint.seq} has hash ${checkpoint.hash}`;
  if (!head || head.seq < checkpoint.seq) {
    const now = head
      ? `the chain ends at seq ${head.seq} (hash ${head.hash})`
      : 'the mesh has no audit rows left';
    return {
      holds: false,
      problem: 'shorter',
      found,
      message: `mesh ${meshId}: chain shorter than the checkpoint: ${expected}, but ${now}: its newest rows were deleted`,
    };
  }
  const atSeq =
    hashesAtSeq.length === 0
      ? `there is no row at seq ${checkpoint.seq} (the chain goes on to seq ${head.seq})`
      : `the row at seq ${checkpoint.seq} has hash ${hashesAtSeq.join(', ')}`;
  return {
    holds: false,
    problem: 'diverged',
    found,
    message: `mesh ${meshId}: chain diverges from the checkpoint: ${expected}, but ${atSeq}: rows up to it were rewritten or removed`,
  };
}
