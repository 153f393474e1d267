/**
 * Walks a mesh's chain straight from Postgres and says whether it holds: every row's hash recomputed,
 * every link checked, every fork (two rows claiming one seq or one prevHash) listed. Used by
 * `audit.verify`, by `workbench audit verify` and by the independent verifier; it trusts no writer.
 */
import type { AuditFork, AuditVerifyResult } from '../../protocol/frames.js';
import type { Pool } from '../db/pool.js';
import { auditHash, GENESIS } from './chain.js';

export interface AuditRow {
  id: number;
  meshId: string;
  seq: number;
  prevHash: string;
  hash: string;
  eventType: string;
  actor: string | null;
  payload: unknown;
  createdAt: Date;
}

export type Fork = AuditFork;

/** What `audit.verify_result` says of a chain (valid, entries, brokenAt, forks), and the chain's head. */
export interface VerifyResult extends Omit<AuditVerifyResult, 'type'> {
  head?: { seq: number; hash: string };
}

export const AUDIT_COLUMNS = `id, mesh_id AS "meshId", seq, prev_hash AS "prevHash", hash, event_type AS "eventType",
  actor, payload, created_at AS "createdAt"`;

/** Verifies rows of one mesh, sorted by (seq, id). */
export function verifyRows(rows: AuditRow[]): VerifyResult {
  const forks: Fork[] = [];
  const bySeq = new Map<number, number[]>();
  const byPrev = new Map<string, AuditRow[]>();
  for (const row of rows) {
    bySeq.set(row.seq, [...(bySeq.get(row.seq) ?? []), row.id]);
    byPrev.set(row.prevHash, [...(byPrev.get(row.prevHash) ?? []), row]);
  }
  for (const [seq, rowIds] of bySeq) if (rowIds.length > 1) forks.push({ kind: 'seq', seq, rowIds });
  for (const sharing of byPrev.values()) {
    if (sharing.length > 1 && new Set(sharing.map((r) => r.seq)).size > 1) {
      forks.push({
        kind: 'prevHash',
        seq: Math.min(...sharing.map((r) => r.seq)),
        rowIds: sharing.map((r) => r.id),
      });
    }
  }

  // Walk level by level (one level per seq). A row links if its prevHash is the hash of some valid row
  // one level down, so each branch of a fork is checked on its own and tampering still shows.
  let brokenAt: VerifyResult['brokenAt'];
  let parentSeq = 0;
  let parents = new Set([GENESIS]);
  let current = new Set<string>();
  for (const row of rows) {
    if (row.seq === parentSeq + 2 && current.size > 0) {
      parents = current;
      current = new Set();
      parentSeq++;
    }
    const reason = problemWith(row, parentSeq, parents);
    if (reason) {
      brokenAt = { seq: row.seq, id: row.id, reason };
      break;
    }
    current.add(row.hash);
  }
  const last = rows[rows.length - 1];
  return {
    valid: brokenAt === undefined && forks.length === 0,
    entries: rows.length,
    ...(brokenAt ? { brokenAt } : {}),
    forks,
    ...(last ? { head: { seq: last.seq, hash: last.hash } } : {}),
  };
}

function problemWith(row: AuditRow, parentSeq: number, parents: Set<string>): string | undefined {
  if (auditHash(row) !== row.hash) return 'hash does not match the row';
  if (row.seq !== parentSeq + 1) {
    return parentSeq === 0
      ? `chain starts at seq ${row.seq}, not 1`
      : `seq jumps from ${parentSeq} to ${row.seq}`;
  }
  if (!parents.has(row.prevHash)) {
    return parentSeq === 0
      ? 'first row does not link to genesis'
      : `prevHash is not the hash of a row at seq ${parentSeq}`;
  }
  return undefined;
}

export async function verifyMesh(pool: Pool, meshId: string): Promise<VerifyResult> {
  const result = await pool.query<AuditRow>(
    `SELECT ${AUDIT_COLUMNS} FROM public.audit_log WHERE mesh_id = $1 ORDER BY seq, id`,
    [meshId],
  );
  return verifyRows(result.rows);
}
