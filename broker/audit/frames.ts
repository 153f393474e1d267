import type { AuditEntry } from '../../protocol/frames.js';
import { auditQueryFrame, auditVerifyFrame } from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { Pool } from '../db/pool.js';
import { fillByBytes } from '../paging.js';
import { type ListReads, primaryReads } from '../regions/regions.js';
import type { AuditLog } from './audit.js';
import { redactFor } from './redact.js';
import { AUDIT_COLUMNS, type AuditRow, verifyMesh } from './verify.js';

function entry(row: AuditRow): AuditEntry {
  return {
    seq: row.seq,
    eventType: row.eventType,
    actor: row.actor,
    payload: row.payload,
    createdAt: row.createdAt.toISOString(),
    prevHash: row.prevHash,
    hash: row.hash,
  };
}

/**
 * `audit.query` (newest first; other members' private fields redacted, broker/audit/redact.ts) and
 * `audit.verify` for the caller's mesh. Both first wait for this
 * node's queued appends of the mesh, so a peer sees the events it just caused.
 */
export function registerAuditFrames(
  router: FrameRoutes,
  pool: Pool,
  audit: AuditLog,
  /** Where `audit.query` reads (the regions row); default `pool`. `audit.verify` stays on `pool`. */
  lists: ListReads = primaryReads(pool),
): void {
  router.on('audit.query', auditQueryFrame, async (frame, { identity }) => {
    await audit.flush(identity.meshId);
    const result = await lists.read<AuditRow>(
      `SELECT ${AUDIT_COLUMNS} FROM public.audit_log WHERE mesh_id = $1 AND ($2::bigint IS NULL OR seq < $2)
        ORDER BY seq DESC, id DESC LIMIT $3`,
      [identity.meshId, frame.before ?? null, frame.limit ?? 100],
    );
    // Redacted on read: the stored rows (and so the chain) stay as written.
    // A page also stops at the byte bound (payloads are the events' own), and then says `more`.
    const { entries, last } = fillByBytes(result.rows.map((row) => redactFor(identity.pubkey, entry(row))));
    return last === undefined
      ? { type: 'audit.result', entries }
      : { type: 'audit.result', entries, more: true };
  });
  router.on('audit.verify', auditVerifyFrame, async (_frame, { identity }) => {
    await audit.flush(identity.meshId);
    const { head: _head, ...result } = await verifyMesh(pool, identity.meshId);
    return { type: 'audit.verify_result', ...result };
  });
}
