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
import { allOk, GroupCommit, RESUME_BURST_MS } from './group-commit.js';
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

/** A feed's read of one member: its unacked items after `afterSeq`, at most `limit`. */
interface BacklogRead {
  memberId: number;
  afterSeq: number;
  limit: number;
}

type FeedPage = { lastSeq: number; items: FeedItem[] };

/** First reads one statement reads at most (each up to a feed page of items). */
const BACKLOGS_PER_READ = 64;

/**
 * Feed reads of several members in one statement, one page each (its own `afterSeq` and `limit`), oldest
 * first: per member, exactly what a read of that member alone returns. One statement, one snapshot: every
 * seq up to a member's last_seq is visible in it (seqs commit in order). A member without a feed row gets
 * last seq 0 and no items.
 */
async function readBacklogs(pool: Pool, reads: BacklogRead[]): Promise<FeedPage[]> {
  const result = await pool.query<MessageRow & { i: string; lastSeq: number; seq: number | null }>(
    `SELECT r.i, f.last_seq AS "lastSeq", d.seq, ${MESSAGE_COLUMNS}
       FROM unnest($1::bigint[], $2::bigint[], $3::int[]) WITH ORDINALITY AS r (member_id, after_seq, lim, i)
       JOIN delivery_feeds f ON f.member_id = r.member_id
       LEFT JOIN LATERAL (
         SELECT seq, message_id FROM deliveries
          WHERE member_id = f.member_id AND seq > r.after_seq
          ORDER BY seq LIMIT r.lim) d ON true
       LEFT JOIN messages m ON m.id = d.message_id
       LEFT JOIN members s ON s.id = m.sender_id
      ORDER BY r.i, d.seq`,
    [reads.map((r) => r.memberId), reads.map((r) => r.afterSeq), reads.map((r) => r.limit)],
  );
  const pages: FeedPage[] = reads.map(() => ({ lastSeq: 0, items: [] }));
  for (const row of result.rows) {
    const page = pages[Number(row.i) - 1]!;
    page.lastSeq = Number(row.lastSeq);
    if (row.seq !== null) page.items.push({ seq: Number(row.seq), frame: toFrame(row) });
  }
  return pages;
}

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
  private readonly backlogs: GroupCommit<BacklogRead, FeedPage>;

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
    // Sessions starting together (a drain's resumes) read their backlogs in one statement.
    this.backlogs = new GroupCommit({
      maxBatch: BACKLOGS_PER_READ,
      maxInFlight: 2,
      burstMs: RESUME_BURST_MS,
      write: async (batch) => allOk(await readBacklogs(pool, batch)),
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
  async read(memberId: number, afterSeq: number, limit: number): Promise<FeedPage> {
    const [page] = await readBacklogs(this.pool, [{ memberId, afterSeq, limit }]);
    return page!;
  }

  /**
   * A session's first read, the same as `read`, shared with the sessions starting within the same
   * `RESUME_BURST_MS` (one statement for all of them).
   */
  readBacklog(memberId: number, afterSeq: number, limit: number): Promise<FeedPage> {
    return this.backlogs.submit({ memberId, afterSeq, limit });
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
