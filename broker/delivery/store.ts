/**
 * The durable side of messaging: accepted messages and their per-recipient delivery rows in Postgres
 * (docs/delivery.md). A message is accepted (and `sent` replied) only once its rows are committed; every
 * delivery path, local or shared, reads from these rows through a session's feed.
 *
 * Accepts and acks from every session of the node are written in batches (group commit), an accept batch
 * in one statement; a caller that holds its own transaction (a schedule's occurrence) accepts inside it
 * instead.
 */
import type { Pool, PoolClient } from '../db/pool.js';
import { type AcceptPolicy, acceptBatch } from './accept.js';
import { type AckRequest, ackBatch } from './acks.js';
import type { FeedItem, FeedSource } from './feed.js';
import { GroupCommit } from './group-commit.js';
import { type HintRow, proveHints } from './hint-proof.js';
import {
  type AcceptedMessage,
  MESSAGE_COLUMNS,
  type MessageRow,
  type NewMessage,
  type Sender,
  toFrame,
} from './records.js';

export type { AcceptedMessage, NewMessage, Sender } from './records.js';

export interface MessageStoreOptions extends AcceptPolicy {
  /** Requests one transaction writes at most. */
  maxBatch?: number;
  /** Ack batches being written at once (accepts: one at a time, for order). */
  maxInFlight?: number;
  /** Each batch's size, for the metrics. */
  onBatch?: (kind: 'accept' | 'ack', size: number) => void;
}

export class MessageStore implements FeedSource {
  private readonly accepts: GroupCommit<{ sender: Sender; message: NewMessage }, AcceptedMessage>;
  private readonly acks: GroupCommit<AckRequest, void>;
  private readonly proofs: GroupCommit<HintRow, boolean>;

  constructor(
    private readonly pool: Pool,
    private readonly options: MessageStoreOptions,
  ) {
    const maxBatch = options.maxBatch ?? 256;
    // One accept batch at a time: a sender's messages may sit in consecutive batches, and its order is
    // their seq order only if each batch locks the feeds after the one before it committed.
    this.accepts = new GroupCommit({
      maxBatch,
      maxInFlight: 1,
      // One statement, its own transaction: one round trip per batch.
      write: (batch) => acceptBatch(pool, batch, options),
      onBatch: (size) => options.onBatch?.('accept', size),
    });
    this.acks = new GroupCommit({
      maxBatch,
      maxInFlight: options.maxInFlight ?? 2,
      write: (batch) => ackBatch(pool, batch),
      onBatch: (size) => options.onBatch?.('ack', size),
    });
    this.proofs = new GroupCommit({
      maxBatch: 1000,
      maxInFlight: 2,
      write: (batch) => proveHints(pool, batch),
    });
  }

  /** Whether the member's unacked row at `seq` is the message `messageId`: a bus hint's proof (batched). */
  prove(memberId: number, seq: number, messageId: string): Promise<boolean> {
    return this.proofs.submit({ memberId, seq, messageId });
  }

  /**
   * Stores a message and one delivery row per recipient member. A retried `id` of the same sender returns
   * the original message as a duplicate. `db`: a caller's own transaction (no batching then).
   */
  async accept(sender: Sender, message: NewMessage, db?: PoolClient): Promise<AcceptedMessage> {
    if (!db) return this.accepts.submit({ sender, message });
    const [outcome] = await acceptBatch(db, [{ sender, message }], this.options);
    if (!outcome!.ok) throw outcome!.error;
    return outcome!.value;
  }

  /** Marks a message delivered to a member. Acking twice is harmless; acking what was never owed is not. */
  ack(memberId: number, messageId: string): Promise<void> {
    return this.acks.submit({ memberId, messageId });
  }

  /** A feed's read: the member's unacked items after `afterSeq`, oldest first, and its last seq now. */
  async read(
    memberId: number,
    afterSeq: number,
    limit: number,
  ): Promise<{ lastSeq: number; items: FeedItem[] }> {
    // One statement, one snapshot: every seq up to last_seq is visible in it (seqs commit in order).
    const result = await this.pool.query<MessageRow & { lastSeq: number; seq: number | null }>(
      `SELECT f.last_seq AS "lastSeq", d.seq, ${MESSAGE_COLUMNS}
         FROM delivery_feeds f
         LEFT JOIN LATERAL (
           SELECT seq, message_id FROM deliveries
            WHERE member_id = f.member_id AND seq > $2
            ORDER BY seq LIMIT $3) d ON true
         LEFT JOIN messages m ON m.id = d.message_id
         LEFT JOIN members s ON s.id = m.sender_id
        WHERE f.member_id = $1
        ORDER BY d.seq`,
      [memberId, afterSeq, limit],
    );
    const lastSeq = Number(result.rows[0]?.lastSeq ?? 0);
    const items = result.rows
      .filter((row) => row.seq !== null)
      .map((row) => ({ seq: Number(row.seq), frame: toFrame(row) }));
    return { lastSeq, items };
  }

  /** Each member's last seq: what the periodic check compares the feeds with. */
  async lastSeqs(memberIds: number[]): Promise<Map<number, number>> {
    if (memberIds.length === 0) return new Map();
    const result = await this.pool.query<{ memberId: number; lastSeq: number }>(
      'SELECT member_id AS "memberId", last_seq AS "lastSeq" FROM delivery_feeds WHERE member_id = ANY ($1::bigint[])',
      [memberIds],
    );
    return new Map(result.rows.map((row) => [Number(row.memberId), Number(row.lastSeq)]));
  }
}
