import type { Pool, PoolClient } from '../db/pool.js';
import type { AuditEntry } from './audit.js';
import { auditHash, GENESIS } from './chain.js';

export interface ChainHead {
  seq: number;
  hash: string;
}

/** The latest row of a mesh's chain as the database has it (genesis for an empty chain). */
export async function readHead(db: Pool | PoolClient, meshId: string): Promise<ChainHead> {
  const result = await db.query<ChainHead>(
    'SELECT seq, hash FROM public.audit_log WHERE mesh_id = $1 ORDER BY seq DESC, id DESC LIMIT 1',
    [meshId],
  );
  return result.rows[0] ?? { seq: 0, hash: GENESIS };
}

/** Appends `batch` after `head` in one INSERT and returns the new head. */
export async function insertAfter(
  db: Pool | PoolClient,
  meshId: string,
  head: ChainHead,
  batch: AuditEntry[],
): Promise<ChainHead> {
  let current = head;
  const rows = batch.map((entry) => {
    const createdAt = new Date();
    const seq = current.seq + 1;
    const hash = auditHash({ ...entry, prevHash: current.hash, seq, createdAt });
    const row = { seq, prevHash: current.hash, hash, entry, createdAt };
    current = { seq, hash };
    return row;
  });
  await db.query(
    `INSERT INTO public.audit_log (mesh_id, seq, prev_hash, hash, event_type, actor, payload, created_at)
     SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::timestamptz[])`,
    [
      meshId,
      rows.map((r) => r.seq),
      rows.map((r) => r.prevHash),
      rows.map((r) => r.hash),
      rows.map((r) => r.entry.eventType),
      rows.map((r) => r.entry.actor),
      rows.map((r) => JSON.stringify(r.entry.payload)),
      rows.map((r) => r.createdAt.toISOString()),
    ],
  );
  return current;
}
