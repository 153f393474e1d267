/**
 * One session's ordered feed (docs/delivery.md): the only thing that writes durable frames to a socket.
 *
 * Postgres is the only source of what a member is owed: each delivery row carries `seq`, the member's own
 * sequence, assigned under the lock of the member's feed row (`delivery_feeds`), so the seqs of one member
 * commit in order and without gaps. A reader that has seen seq N therefore knows that every seq below N is
 * already visible: the trap of ids that commit out of order (a reader past N missing an N−1 that commits
 * later) cannot happen. The feed keeps a cursor: every owed item with seq ≤ cursor has been written to this
 * socket (or was acked, or expired). It only ever writes the item right after the cursor, so a later message
 * of a sender can never pass an earlier one, whatever wake-ups were lost.
 *
 * A wake-up only tells the feed to look. It may carry the item it is about (a hint). A hint of this node's
 * own accept (`local`: the row this node just committed) is written at once when it is exactly the next item
 * (seq = cursor + 1), which is what the feed would have read. A hint over the bus (`remote`, from a verified
 * envelope only: bus/envelope.ts) is never written on its word. Right after the cursor, it is written once
 * Postgres proves its row (the member's unacked row at that seq is that message, id and tag: one
 * primary-key lookup, batched with the other sessions' proofs, `FeedSource.prove`); otherwise, or when the
 * proof fails, it makes the feed read, and is written only once that read shows the member's rows reach its
 * seq (an item another session of the member acked meanwhile is still this session's to get); one the read
 * does not show is dropped. So no hint moves the cursor past a row Postgres has not shown this feed
 * (docs/design.md § The bus envelope, the hint rule).
 * A lost wake-up costs latency (until the next wake-up of the member, or the periodic check), never order;
 * the first read of a session is its backlog replay (`FeedSource.readBacklog`: one statement for the sessions
 * starting together, as a drain's resumes do; docs/delivery.md § Resume).
 *
 * History can rewind under a running feed: a restore, or a failover to a replica that had not received the
 * last commits, behind an address the node keeps using (docs/protocol.md § Message identity). The member's
 * last seq in Postgres is then below the cursor and the next seqs are handed out again, to other messages
 * (other messageIds). Two things prove it: a hint at or below the cursor naming another message than the
 * one this feed wrote at that seq (it remembers the last WRITTEN_KEPT), or a read that finds the member's
 * last seq below the cursor it read from (every seq up to the cursor was committed before it was written
 * here). Either starts the feed again from seq 0: the backlog is replayed, the SDK drops what it has seen
 * by messageId, and the new history's messages go out. A rewind that neither shows (no wake-up of the
 * member, and the new history already past the cursor) is only healed by the session's next connect.
 */
import type { DurableFrame } from '../../protocol/frames.js';
import type { ConnectionFeed } from '../connections/connection.js';
import type { Logger } from '../log.js';
import { planted } from '../plants.js';

export interface FeedItem {
  seq: number;
  frame: DurableFrame;
}

/** What a feed reads: the member's unacked items after a seq, and the member's last seq at that moment. */
export interface FeedSource {
  read(memberId: number, afterSeq: number, limit: number): Promise<{ lastSeq: number; items: FeedItem[] }>;
  /**
   * The same read, for a session's first (its backlog replay): shared with the sessions starting at about
   * the same time (one statement for a drain's resumes; MessageStore). `read` when absent.
   */
  readBacklog?(
    memberId: number,
    afterSeq: number,
    limit: number,
  ): Promise<{ lastSeq: number; items: FeedItem[] }>;
  /** Whether the member's unacked row at `seq` is the message `messageId` (a bus hint's proof). */
  prove?(memberId: number, seq: number, messageId: string): Promise<boolean>;
}

/** The socket side of a feed. */
export interface FeedSocket {
  readonly isOpen: boolean;
  /** The peer is behind on reading: the feed writes nothing more until it has caught up. */
  readonly congested: boolean;
  whenDrained(): Promise<void>;
  writeDurable(frame: DurableFrame): void;
}

/**
 * Items written, by path: from a hint of this node's accept (`local`), without reading; from a hint over the
 * bus (`remote`) once a read showed its row; or from a read (`backlog`: a session's first read, a gap after
 * a lost wake-up, the periodic check).
 */
export type FeedCounter = (path: HintPath | 'backlog', count: number) => void;

export type HintPath = 'local' | 'remote';
type FeedPath = HintPath | 'backlog';

interface Hint {
  frame: DurableFrame;
  path: HintPath;
  /** Reads started before it arrived: a remote hint a read started after it does not show is dropped. */
  readsBefore: number;
}

/** Items one read fetches; a longer backlog is read page by page. */
export const FEED_PAGE = 500;
/** Hints kept while a read runs; past this they are dropped (the next read covers them). */
const MAX_HINTS = 1000;
/** A failed read is tried again after this. */
const RETRY_MS = 1000;
/** Hints right after the cursor proven in one go (one batched statement). */
const PROOF_RUN = 100;
/** Seqs whose written messageId the feed remembers, to tell a repeated hint from a rewound history's. */
const WRITTEN_KEPT = 256;

export class SessionFeed implements ConnectionFeed {
  private cursor = 0;
  private started = false;
  private reading: Promise<void> | undefined;
  private again = false;
  /** Something only a read answers is pending (not just a bus hint right after the cursor, to prove). */
  private fullRead = false;
  private readonly hints = new Map<number, Hint>();
  private reads = 0;
  /** Counts rewinds: a read that began before one is of the old history and is read again. */
  private rewinds = 0;
  /** The messageId written at each of the last WRITTEN_KEPT seqs. */
  private readonly written = new Map<number, string>();
  private retry: NodeJS.Timeout | undefined;

  constructor(
    readonly memberId: number,
    private readonly socket: FeedSocket,
    private readonly source: FeedSource,
    private readonly counted: FeedCounter,
    private readonly log: Logger,
  ) {}

  /**
   * The session's first read: everything its member is owed, oldest first. Wake-ups before it are
   * coalesced into it. Resolves once the backlog (as of now) has been written.
   */
  start(): Promise<void> {
    this.started = true;
    this.requestRead();
    return this.reading ?? Promise.resolve();
  }

  /** Something may be owed to this member. `hint`: the item the waker knows about, if any. */
  wake(hint?: FeedItem, path: HintPath = 'local'): void {
    if (hint) {
      if (hint.seq <= this.cursor) {
        // Already dealt with, unless it is another message at that seq: the history rewound (see above).
        const written = this.written.get(hint.seq);
        if (written === hint.frame.messageId) return;
        if (written !== undefined) this.rewound(this.cursor, hint.seq, 'a new message at a written seq');
        this.requestRead();
        return;
      }
      const next = hint.seq === this.cursor + 1;
      // PLANTED BUG (tests only): a hint beyond a gap written on its word, ahead of the items before it;
      // the cursor passes them, so this session gets them only after a reconnect's replay, if ever.
      if (planted('feed-out-of-order') && !next) {
        this.write(hint);
        this.counted(path, 1);
        return;
      }
      if (path === 'local' && next && this.started && !this.reading && !this.socket.congested) {
        this.write(hint);
        this.counted('local', 1);
        return;
      }
      if (this.hints.size < MAX_HINTS) {
        this.hints.set(hint.seq, { frame: hint.frame, path, readsBefore: this.reads });
        // A bus hint right after the cursor (or right after hints waiting there) needs only its proof, not
        // a read (unless something else does).
        if (path === 'remote' && (next || this.hints.has(hint.seq - 1)) && this.source.prove) {
          this.requestRead(false);
          return;
        }
      }
    }
    this.requestRead();
  }

  /**
   * The periodic check: the member's last seq in Postgres is past what this feed has dealt with, or below
   * it (a rewound history, or a hint written since the check read the seqs: the read tells them apart).
   */
  behind(lastSeq: number): boolean {
    return lastSeq !== this.cursor;
  }

  close(): void {
    clearTimeout(this.retry);
    this.hints.clear();
  }

  private requestRead(full = true): void {
    if (full) this.fullRead = true;
    if (!this.started || this.reading) {
      this.again = true;
      return;
    }
    this.reading = this.readLoop().finally(() => {
      this.reading = undefined;
    });
  }

  private async readLoop(): Promise<void> {
    try {
      do {
        this.again = false;
        // A peer behind on reading gets nothing more until it caught up: the node holds at most about
        // OUTBOUND_HIGH_WATER for it, not its backlog; the rest stays in Postgres.
        await this.socket.whenDrained();
        if (!this.socket.isOpen) return;
        if (!this.fullRead && (await this.writeProvenHints())) continue;
        this.fullRead = false;
        const readNo = ++this.reads;
        const from = this.cursor;
        const rewinds = this.rewinds;
        const page =
          readNo === 1 && this.source.readBacklog
            ? await this.source.readBacklog(this.memberId, from, FEED_PAGE)
            : await this.source.read(this.memberId, from, FEED_PAGE);
        if (!this.socket.isOpen) return;
        if (rewinds !== this.rewinds) {
          this.again = true;
          continue;
        }
        if (page.lastSeq < from) {
          this.rewound(from, page.lastSeq, "the member's last seq below the cursor");
          this.again = true;
          continue;
        }
        const complete = page.items.length < FEED_PAGE;
        // The member's rows this read has shown: all up to its last seq, or up to the page's end.
        const shownUpTo = complete ? page.lastSeq : (page.items.at(-1)?.seq ?? this.cursor);
        let cutShort = false;
        for (const item of this.withShownHints(page.items, shownUpTo)) {
          if (item.seq <= this.cursor) continue;
          if (this.socket.congested) {
            cutShort = true; // the rest of the page is read again once the peer caught up
            break;
          }
          this.hints.delete(item.seq);
          this.write(item);
          this.counted(item.path, 1);
        }
        // A complete page, all written: nothing unacked at or below the member's last seq is left unwritten.
        if (cutShort || !complete) this.again = true;
        else this.cursor = Math.max(this.cursor, page.lastSeq);
        this.settleHints(readNo, shownUpTo);
      } while (this.again && this.socket.isOpen);
    } catch (error) {
      this.log.warn({ err: error, memberId: this.memberId }, 'feed read failed; trying again');
      clearTimeout(this.retry);
      this.retry = setTimeout(() => this.requestRead(), RETRY_MS);
      this.retry.unref();
    }
  }

  /** Starts the feed again from seq 0: its next read replays the member's whole backlog. */
  private rewound(cursor: number, seq: number, evidence: string): void {
    this.log.warn(
      { memberId: this.memberId, cursor, seq, evidence },
      'history rewound under this session (a restore or a failover): replaying its backlog',
    );
    this.rewinds++;
    this.cursor = 0;
    this.hints.clear();
    this.written.clear();
  }

  /**
   * The page's items with the hints of rows it shows but no longer holds (acked by another session of the
   * member meanwhile), in seq order; an item of the page always wins over a hint of the same seq.
   */
  private withShownHints(items: FeedItem[], shownUpTo: number): Array<FeedItem & { path: FeedPath }> {
    const merged: Array<FeedItem & { path: FeedPath }> = items.map((item) => ({ ...item, path: 'backlog' }));
    const inPage = new Set(items.map((item) => item.seq));
    for (const [seq, hint] of this.hints)
      if (seq > this.cursor && seq <= shownUpTo && !inPage.has(seq))
        merged.push({ seq, frame: hint.frame, path: hint.path });
    return merged.sort((x, y) => x.seq - y.seq);
  }

  /**
   * After read `readNo`: hints it covered go; a remote hint it does not show although it arrived before the
   * read started names no row of this member (dropped: never written, no read again for it); local hints
   * right after the cursor are written.
   */
  private settleHints(readNo: number, shownUpTo: number): void {
    for (const [seq, hint] of this.hints) {
      const unshown = hint.path === 'remote' && seq > shownUpTo && hint.readsBefore < readNo;
      if (seq <= this.cursor || unshown) this.hints.delete(seq);
    }
    this.writeLocalHints();
    // A hint beyond a gap, or one over the bus that came during the read: read again (once for the latter).
    if (this.hints.size > 0) this.again = true;
  }

  /**
   * The cheap path of bus hints right after the cursor: the run of hints from cursor + 1 on (at most
   * PROOF_RUN) is proven at once (one batched statement), and written in seq order without a read as far as
   * each is proven (a local hint needs no proof). False when there is no such hint or the first is not
   * proven (or the feed moved meanwhile): the caller reads, which writes a hint if its row is shown and drops
   * it otherwise. A run cut short by an unproven hint asks for that read.
   */
  private async writeProvenHints(): Promise<boolean> {
    const from = this.cursor + 1;
    const run: Array<{ seq: number; hint: Hint }> = [];
    for (let seq = from; run.length < PROOF_RUN; seq++) {
      const hint = this.hints.get(seq);
      if (!hint) break;
      run.push({ seq, hint });
    }
    // Woken only for hints, and they were all written meanwhile: nothing is owed that a read would find.
    if (this.hints.size === 0) return true;
    if (run[0]?.hint.path !== 'remote' || !this.source.prove) return false;
    const rewinds = this.rewinds;
    const proven = await Promise.all(
      run.map(({ seq, hint }) =>
        hint.path === 'local' ? true : this.source.prove!(this.memberId, seq, hint.frame.messageId),
      ),
    );
    if (!proven[0] || rewinds !== this.rewinds || this.cursor !== from - 1) return false;
    for (const [i, { seq, hint }] of run.entries()) {
      if (!this.socket.isOpen) return true; // the loop ends
      if (this.hints.get(seq) !== hint) break; // superseded meanwhile: the next round looks again
      if (!proven[i]) {
        this.fullRead = true; // an unproven hint: only a read can tell
        break;
      }
      if (this.socket.congested) break; // proven again once the peer caught up
      this.hints.delete(seq);
      this.write({ seq, frame: hint.frame });
      this.counted(hint.path, 1);
    }
    this.writeLocalHints();
    if (this.hints.size > 0) this.again = true;
    return true;
  }

  /** Local hints right after the cursor: written, as a read would have written them. */
  private writeLocalHints(): void {
    let next = this.hints.get(this.cursor + 1);
    while (next?.path === 'local' && !this.socket.congested) {
      this.hints.delete(this.cursor + 1);
      this.write({ seq: this.cursor + 1, frame: next.frame });
      this.counted('local', 1);
      next = this.hints.get(this.cursor + 1);
    }
  }

  private write(item: FeedItem): void {
    this.cursor = item.seq;
    this.written.set(item.seq, item.frame.messageId);
    if (this.written.size > WRITTEN_KEPT) this.written.delete(this.written.keys().next().value!);
    if (this.socket.isOpen) this.socket.writeDurable(item.frame);
  }
}
