/**
 * Acks, written in batches (group commit): one statement deletes the acked delivery rows (the member is no
 * longer owed those messages). Nothing else changes, so an ack batch takes no lock but its rows'.
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { Pool } from '../db/pool.js';
import type { Outcome } from './group-commit.js';

export interface AckRequest {
  memberId: number;
  messageId: string;
}

export async function ackBatch(pool: Pool, acks: AckRequest[]): Promise<Array<Outcome<void>>> {
  const valid = acks.map((ack) => /^\d{1,15}$/.test(ack.messageId));
  const messageIds = acks.map((ack, i) => (valid[i] ? ack.messageId : '0'));
  const memberIds = acks.map((ack) => ack.memberId);
  const acked = await pool.query<{ memberId: number; messageId: number }>(
    `DELETE FROM deliveries d USING unnest($1::bigint[], $2::bigint[]) AS u(message_id, member_id)
      WHERE d.message_id = u.message_id AND d.member_id = u.member_id
      RETURNING d.member_id AS "memberId", d.message_id AS "messageId"`,
    [messageIds, memberIds],
  );
  const key = (memberId: number | string, messageId: number | string) => `${memberId}:${messageId}`;
  const done = new Set(acked.rows.map((row) => key(row.memberId, row.messageId)));
  // Not acked now: acked before (harmless), or never owed to this member (not_found). A message removed
  // by retention is not found either: its window is over.
  const open = acks.filter((ack, i) => valid[i] && !done.has(key(ack.memberId, ack.messageId)));
  const known = new Set<string>();
  if (open.length > 0) {
    const rows = await pool.query<{ memberId: number; messageId: number }>(
      `SELECT r.member_id AS "memberId", m.id AS "messageId" FROM messages m
         JOIN unnest($1::bigint[], $2::bigint[]) AS r(message_id, member_id)
           ON m.id = r.message_id AND r.member_id = ANY (m.recipients)`,
      [open.map((ack) => ack.messageId), open.map((ack) => ack.memberId)],
    );
    for (const row of rows.rows) known.add(key(row.memberId, row.messageId));
  }
  return acks.map((ack, i) => {
    const k = key(ack.memberId, ack.messageId);
    if (valid[i] && (done.has(k) || known.has(k))) return { ok: true, value: undefined };
    return { ok: false, error: new ProtocolError('not_found', `no message ${ack.messageId} for you`) };
  });
}
