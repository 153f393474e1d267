/**
 * Accepting messages: one call of the database function `accept_messages` (migrations/0013_accept_messages.sql,
 * as migration 0014 redefined it to return each message's tag)
 * stores a batch of messages and their delivery rows, each row with the recipient member's next `seq`
 * (docs/delivery.md). The whole accept runs in the database because nothing of it needs the broker: one
 * round trip per batch (its own transaction, or part of a caller's), which is what a send from a far region
 * pays before its ack (docs/multi-region.md § The cost of a durable send from region B).
 *
 * Per message, in arrival order (the function's header says how and why):
 * - a retried `id` of the same sender is the original message again (`duplicate`), nothing new stored; a
 *   second copy within the batch is the first copy's outcome, marked duplicate;
 * - a revoked sender is `forbidden`; an unknown DM recipient `not_found`; a DM to oneself `bad_request`;
 * - a recipient whose backlog is full (BACKLOG_MAX unacked): a DM is refused with `limit_exceeded`, a
 *   broadcast or group message skips that member (counted);
 * - otherwise the message, its rows and the recipients' new seqs; and, for a DM or group message, the
 *   nodes that hold a session of a recipient (presence), so that only they are woken.
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { Pool, PoolClient } from '../db/pool.js';
import type { Outcome } from './group-commit.js';
import { type AcceptedMessage, type MessageRow, type NewMessage, type Sender, toFrame } from './records.js';

export interface AcceptRequest {
  sender: Sender;
  message: NewMessage;
}

export interface AcceptPolicy {
  /** Unacked messages a member may be owed; past it, see above. */
  backlogMax: number;
}

/** One row of `accept_messages`: a request's outcome. */
type OutcomeRow = MessageRow & {
  /** Null when accepted; otherwise the ProtocolError code of the refusal. */
  refused: 'forbidden' | 'bad_request' | 'not_found' | 'limit_exceeded' | null;
  recipients: number[];
  seqs: number[];
  duplicate: boolean;
  nodes: string[] | null;
  dropped: number;
};

export async function acceptBatch(
  db: Pool | PoolClient,
  requests: AcceptRequest[],
  policy: AcceptPolicy,
): Promise<Array<Outcome<AcceptedMessage>>> {
  const { rows } = await db.query<OutcomeRow>(
    `SELECT refused, message_id AS id, message_tag AS tag, client_id AS "clientId", sender_pubkey AS "from",
            sender_session AS "fromSession", target, body, kind, schedule_id AS "scheduleId", occurrence,
            created_at AS "createdAt", recipients, seqs, duplicate, nodes, dropped
       FROM accept_messages($1::uuid[], $2::bigint[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                            $7::text[], $8::text[], $9::uuid[], $10::int[], $11::boolean[], $12::int)`,
    [
      requests.map((r) => r.sender.meshId),
      requests.map((r) => r.sender.memberId),
      requests.map((r) => r.sender.sessionId),
      requests.map((r) => r.sender.pubkey),
      requests.map((r) => r.message.id),
      requests.map((r) => r.message.to),
      requests.map((r) => r.message.body),
      requests.map((r) => r.message.kind ?? 'message'),
      requests.map((r) => r.message.scheduleId ?? null),
      requests.map((r) => r.message.occurrence ?? null),
      requests.map((r) => r.message.allowSelf ?? false),
      policy.backlogMax,
    ],
  );
  return rows.map((row) => (row.refused ? refused(row, policy) : accepted(row)));
}

function accepted(row: OutcomeRow): Outcome<AcceptedMessage> {
  return {
    ok: true,
    value: {
      frame: toFrame(row),
      recipients: row.recipients,
      // Empty for a message accepted before this batch: nothing is sent again.
      seqs: row.seqs.map((seq, i) => [row.recipients[i]!, seq]),
      duplicate: row.duplicate,
      nodes: row.nodes ?? undefined,
      dropped: row.dropped,
    },
  };
}

function refused(row: OutcomeRow, policy: AcceptPolicy): Outcome<AcceptedMessage> {
  const messages = {
    forbidden: 'the sending member is revoked',
    bad_request: 'cannot send a message to yourself',
    not_found: `no member ${row.target} in this mesh`,
    limit_exceeded: `the recipient's backlog is full (${policy.backlogMax} unacked messages)`,
  };
  return { ok: false, error: new ProtocolError(row.refused!, messages[row.refused!]) };
}
