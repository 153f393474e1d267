/**
 * Acks, written in batches (group commit): one statement deletes the acked delivery rows (the member is no
 * longer owed those messages). Nothing else changes, so an ack batch takes no lock but its rows'.
 *
 * An ack names a message by its whole messageId, row id and tag (message-id.ts): after a restore or a
 * promotion hands a row id out again, an ack of the old message (its tag) acks nothing of the new one.
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { Pool } from '../db/pool.js';
import type { Outcome } from './group-commit.js';
import { formatMessageId, parseMessageId } from './message-id.js';

export interface AckRequest {
  memberId: number;
  messageId: string;
}

export async function ackBatch(pool: Pool, acks: AckRequest[]): Promise<Array<Outcome<void>>> {
  // The request schema already refuses anything else; one that slipped through matches no row.
  const parsed = acks.map((ack) => parseMessageId(ack.messageId) ?? { id: '0', tag: '' });
  const memberIds = acks.map((ack) => ack.memberId);
  const acked = await pool.query<{ memberId: number; id: number; tag: string }>(
    `DELETE FROM deliveries d
      USING messages m, unnest($1::bigint[], $2::text[], $3::bigint[]) AS u(message_id, tag, member_id)
      WHERE m.id = u.message_id AND m.tag = u.tag
        AND d.message_id = u.message_id AND d.member_id = u.member_id
      RETURNING d.member_id AS "memberId", m.id, m.tag`,
    [parsed.map((p) => p.id), parsed.map((p) => p.tag), memberIds],
  );
  const key = (memberId: number | string, messageId: string) => `${memberId}:${messageId}`;
  const done = new Set(acked.rows.map((row) => key(row.memberId, formatMessageId(row.id, row.tag))));
  // Not acked now: acked before (harmless), or never owed to this member (not_found). A message removed
  // by retention is not found either: its window is over.
  const open = acks.filter((ack) => !done.has(key(ack.memberId, ack.messageId)));
  const known = new Set<string>();
  if (open.length > 0) {
    const openIds = open.map((ack) => parseMessageId(ack.messageId) ?? { id: '0', tag: '' });
    const rows = await pool.query<{ memberId: number; id: number; tag: string }>(
      `SELECT r.member_id AS "memberId", m.id, m.tag FROM messages m
         JOIN unnest($1::bigint[], $2::text[], $3::bigint[]) AS r(message_id, tag, member_id)
           ON m.id = r.message_id AND m.tag = r.tag AND r.member_id = ANY (m.recipients)`,
      [openIds.map((p) => p.id), openIds.map((p) => p.tag), open.map((ack) => ack.memberId)],
    );
    for (const row of rows.rows) known.add(key(row.memberId, formatMessageId(row.id, row.tag)));
  }
  return acks.map((ack) => {
    const k = key(ack.memberId, ack.messageId);
    if (done.has(k) || known.has(k)) return { ok: true, value: undefined };
    return { ok: false, error: new ProtocolError('not_found', `no message ${ack.messageId} for you`) };
  });
}
