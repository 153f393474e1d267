/**
 * The proof a bus hint needs before a feed writes it (docs/design.md § The bus envelope, the hint rule):
 * Postgres shows the member's delivery row at the hinted seq, for the hinted message (its row id AND its
 * tag: after a rewound history a row id can name another message). One statement for the hints of every
 * session of the node that wait at the same moment (group commit, broker/delivery/group-commit.ts): by
 * primary key, no bodies read, so it costs far less than the feed's read it stands in for.
 */
import type { Pool } from '../db/pool.js';
import type { Outcome } from './group-commit.js';
import { parseMessageId } from './message-id.js';

export interface HintRow {
  memberId: number;
  seq: number;
  messageId: string;
}

/** For each hint, in order: whether its row is there, unacked, and is that message. */
export async function proveHints(pool: Pool, hints: HintRow[]): Promise<Array<Outcome<boolean>>> {
  const identities = hints.map((hint) => parseMessageId(hint.messageId));
  const result = await pool.query<{ i: string }>(
    `SELECT h.i FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[])
              WITH ORDINALITY AS h(member_id, seq, message_id, tag, i)
       JOIN deliveries d ON d.member_id = h.member_id AND d.seq = h.seq AND d.message_id = h.message_id
       JOIN messages m ON m.id = h.message_id AND m.tag = h.tag`,
    [
      hints.map((hint) => hint.memberId),
      hints.map((hint) => hint.seq),
      // Not a messageId of ours: a row id no message has, so the hint is simply not proven.
      identities.map((identity) => identity?.id ?? '0'),
      identities.map((identity) => identity?.tag ?? ''),
    ],
  );
  const proven = new Set(result.rows.map((row) => Number(row.i) - 1));
  return hints.map((_, i) => ({ ok: true, value: proven.has(i) }));
}
