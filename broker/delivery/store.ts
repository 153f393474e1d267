/**
 * The durable side of messaging: accepted messages and their per-recipient delivery state in Postgres.
 * A message is accepted (and `sent` replied) only once its rows are committed; every delivery path, local
 * or shared, starts from these rows.
 */

import { ProtocolError } from '../../protocol/errors.js';
import type { DurableFrame } from '../connections/connection.js';
import type { Pool, PoolClient } from '../db/pool.js';

/** Who a stored message is from: a member's session (a peer's send, or its schedule or watch). */
export interface Sender {
  meshId: string;
  memberId: number;
  sessionId: string;
  pubkey: string;
}

export interface NewMessage {
  /** The idempotency key: a retried id of the same sender is the same message. */
  id: string;
  to: string;
  body: string;
  /** `message` (default) or `watch.triggered` (body is the notification's JSON). */
  kind?: 'message' | 'watch.triggered';
  scheduleId?: string;
  occurrence?: number;
  /** The sender itself may be the recipient (watch notifications); peers' sends may not. */
  allowSelf?: boolean;
}

export interface AcceptedMessage {
  frame: DurableFrame;
  /** Member ids owed this message. */
  recipients: number[];
  /** True when this `id` had been accepted before: nothing new was stored and nothing is sent again. */
  duplicate: boolean;
}

interface Row {
  id: number;
  clientId: string;
  from: string;
  fromSession: string;
  target: string;
  body: string;
  kind: string;
  scheduleId: string | null;
  occurrence: number | null;
  createdAt: Date;
}

const ROW = `m.id, m.client_id AS "clientId", s.pubkey AS "from", m.sender_session AS "fromSession", m.target,
  m.body, m.kind, m.schedule_id AS "scheduleId", m.occurrence, m.created_at AS "createdAt"`;

/** The frame a recipient gets for a stored row: a `message`, or a durable `watch.triggered`. */
function toFrame(row: Row): DurableFrame {
  const base = { messageId: String(row.id), sentAt: row.createdAt.toISOString() };
  if (row.kind === 'watch.triggered') {
    return { type: 'watch.triggered', ...base, ...(JSON.parse(row.body) as object) };
  }
  return {
    type: 'message',
    ...base,
    id: row.clientId,
    from: row.from,
    fromSession: row.fromSession,
    to: row.target,
    body: row.body,
    ...(row.scheduleId === null ? {} : { scheduleId: row.scheduleId, occurrence: row.occurrence }),
  };
}

/** How many backlog messages one query fetches while a session catches up. */
const BACKLOG_PAGE = 500;

export class MessageStore {
  constructor(private readonly pool: Pool) {}

  /**
   * Stores a message and one delivery row per recipient member, in one statement. A retried `id` of the
   * same sender returns the original message as a duplicate.
   */
  /** `db` lets a caller store the message inside its own transaction (a schedule's occurrence). */
  async accept(
    sender: Sender,
    message: NewMessage,
    db: Pool | PoolClient = this.pool,
  ): Promise<AcceptedMessage> {
    const { id, to, body } = message;
    if (to !== '*' && !to.startsWith('@')) {
      if (to === sender.pubkey && !message.allowSelf) {
        throw new ProtocolError('bad_request', 'cannot send a message to yourself');
      }
      const found = await db.query(
        'SELECT 1 FROM members WHERE mesh_id = $1 AND pubkey = $2 AND revoked_at IS NULL',
        [sender.meshId, to],
      );
      if (found.rowCount === 0) throw new ProtocolError('not_found', `no member ${to} in this mesh`);
    }
    const result = await db.query<Row & { recipients: number[] | null }>(
      `WITH ins AS (
         INSERT INTO messages (mesh_id, sender_id, sender_session, client_id, target, body, kind, schedule_id, occurrence)
         SELECT $1, $2, $3, $4, $5, $6, $8, $9, $10
          WHERE EXISTS (SELECT 1 FROM members WHERE id = $2 AND revoked_at IS NULL)
         ON CONFLICT (mesh_id, sender_id, client_id) DO NOTHING
         RETURNING id, created_at
       ), rcpt AS (
         INSERT INTO deliveries (message_id, member_id)
         SELECT ins.id, m.id FROM ins, members m
          WHERE m.mesh_id = $1 AND m.revoked_at IS NULL AND (m.id <> $2 OR $11)
            AND CASE WHEN $5 = '*' THEN m.id <> $2
                     WHEN left($5, 1) = '@' THEN m.id <> $2 AND substr($5, 2) = ANY (m.groups)
                     ELSE m.pubkey = $5 END
         RETURNING member_id
       )
       SELECT ins.id, $4::text AS "clientId", $7::text AS "from", $3::text AS "fromSession", $5::text AS target,
              $6::text AS body, $8::text AS kind, $9::uuid AS "scheduleId", $10::int AS occurrence,
              ins.created_at AS "createdAt",
              (SELECT array_agg(member_id ORDER BY member_id) FROM rcpt) AS recipients
         FROM ins`,
      [
        sender.meshId,
        sender.memberId,
        sender.sessionId,
        id,
        to,
        body,
        sender.pubkey,
        message.kind ?? 'message',
        message.scheduleId ?? null,
        message.occurrence ?? null,
        message.allowSelf ?? false,
      ],
    );
    const row = result.rows[0];
    if (row) return { frame: toFrame(row), recipients: row.recipients ?? [], duplicate: false };
    const revoked = await db.query('SELECT 1 FROM members WHERE id = $1 AND revoked_at IS NOT NULL', [
      sender.memberId,
    ]);
    if (revoked.rowCount) throw new ProtocolError('forbidden', 'the sending member is revoked');
    return this.original(sender, id, db);
  }

  private async original(sender: Sender, id: string, db: Pool | PoolClient): Promise<AcceptedMessage> {
    const result = await db.query<Row & { recipients: number[] | null }>(
      `SELECT ${ROW},
              (SELECT array_agg(member_id ORDER BY member_id) FROM deliveries WHERE message_id = m.id) AS recipients
         FROM messages m JOIN members s ON s.id = m.sender_id
        WHERE m.mesh_id = $1 AND m.sender_id = $2 AND m.client_id = $3`,
      [sender.meshId, sender.memberId, id],
    );
    const row = result.rows[0];
    if (!row) throw new Error(`message ${id} of member ${sender.memberId} vanished after a conflict`);
    return { frame: toFrame(row), recipients: row.recipients ?? [], duplicate: true };
  }

  /** Every message still owed to a member (not acked), oldest first, page by page. */
  async *pending(memberId: number): AsyncGenerator<DurableFrame> {
    let after = 0;
    for (;;) {
      const result = await this.pool.query<Row>(
        `SELECT ${ROW}
           FROM deliveries d
           JOIN messages m ON m.id = d.message_id
           JOIN members s ON s.id = m.sender_id
          WHERE d.member_id = $1 AND d.acked_at IS NULL AND d.message_id > $2
          ORDER BY d.message_id
          LIMIT ${BACKLOG_PAGE}`,
        [memberId, after],
      );
      for (const row of result.rows) yield toFrame(row);
      if (result.rows.length < BACKLOG_PAGE) return;
      after = result.rows[result.rows.length - 1]!.id;
    }
  }

  /**
   * Unacked messages of any of `memberIds` accepted at least `minAgeMs` ago, oldest first: what the
   * delivery sweep re-offers to this node's sessions in case a wake-up was lost.
   */
  async owedTo(
    memberIds: number[],
    minAgeMs: number,
    limit = 500,
  ): Promise<Array<{ memberId: number; frame: DurableFrame }>> {
    if (memberIds.length === 0) return [];
    // The oldest `limit` per member: one member that never acks must not hide everybody else's messages.
    const result = await this.pool.query<Row & { memberId: number }>(
      `SELECT * FROM (
         SELECT d.member_id AS "memberId", ${ROW},
                row_number() OVER (PARTITION BY d.member_id ORDER BY d.message_id) AS rank
           FROM deliveries d
           JOIN messages m ON m.id = d.message_id
           JOIN members s ON s.id = m.sender_id
          WHERE d.member_id = ANY ($1::bigint[]) AND d.acked_at IS NULL
            AND m.created_at < now() - make_interval(secs => $2 / 1000.0)) owed
        WHERE rank <= $3 ORDER BY id`,
      [memberIds, minAgeMs, limit],
    );
    return result.rows.map((row) => ({ memberId: row.memberId, frame: toFrame(row) }));
  }

  /** Marks a message delivered to a member. Acking twice is harmless; acking what was never owed is not. */
  async ack(memberId: number, messageId: string): Promise<void> {
    const result = await this.pool.query(
      `WITH upd AS (
         UPDATE deliveries SET acked_at = coalesce(acked_at, now())
          WHERE message_id = $1 AND member_id = $2 RETURNING 1)
       SELECT count(*)::int AS n FROM upd`,
      [messageId, memberId],
    );
    if (result.rows[0].n === 0) throw new ProtocolError('not_found', `no message ${messageId} for you`);
  }
}
