/**
 * Stream continuity on one node (issue 28, item 4; docs/design.md § Stream positions): the order in which
 * this node hands a stream's publishes to its subscribers, and what it does about the ones it missed.
 *
 * - Live gaps: per stream with subscribers here, the last offset delivered. A publish one above it goes out
 *   at once; one that skips (the bus lost those between) waits while the missing ones are read from the
 *   history and delivered first, in order; what the history no longer holds is announced to the stream's
 *   subscribers here as `stream.gap` (never silence). Older or repeated offsets (a publish read from the
 *   history and then also received over the bus) are dropped: each offset goes out once.
 * - The position check (`check`, every STREAM_POSITION_CHECK_MS): the tops of the tracked streams are read;
 *   a top still above what was delivered one round later (longer than a bus hop) is a lost last publish,
 *   filled the same way without waiting for a newer one.
 * - Resuming (`subscribe` with `since`): the session's live frames are held while the history is read,
 *   then the missed publishes go out, then the held ones above them (LocalStreams' catch-up).
 * Bounded: one entry per stream with subscribers on this node (dropped when it has none left), and at most
 * PENDING_MAX frames waiting behind a fill (beyond it a frame is dropped here, which is one more gap the
 * next fill reads back).
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { StreamData, StreamGap, StreamLossReason, StreamPosition } from '../../protocol/frames.js';
import type { SessionIdentity } from '../connections/connection.js';
import type { PlacedFrame, StreamHistory, UnplacedFrame } from './history.js';
import type { StreamSubscription } from './streams.js';

/** Who gets a frame on this node: the local registry (streams.local.ts). */
export interface Registry {
  deliverHere(meshId: string, frame: StreamData): number;
  hasSubscribers(meshId: string, stream: string): boolean;
  notify(meshId: string, stream: string, frame: StreamGap): void;
  hold(sessionId: string, stream: string): void;
  release(
    sessionId: string,
    stream: string,
    floor: { epoch: string; through: number } | undefined,
    replay: StreamData[],
  ): void;
}

/** Frames one stream may have waiting behind a fill. */
export const PENDING_MAX = 10_000;

interface Tracked {
  meshId: string;
  stream: string;
  epoch: string;
  /** The last offset delivered here. */
  offset: number;
  /** A fill is reading the history: arriving frames wait in `pending`. */
  busy: boolean;
  pending: StreamData[];
  /** The top the previous check saw: still ahead at the next one means lost. */
  suspect?: { epoch: string; offset: number };
}

export class Continuity {
  private readonly tracked = new Map<string, Tracked>();

  constructor(
    private readonly history: StreamHistory,
    private readonly registry: Registry,
    /** Counts one gap found, by outcome (metrics.streamGaps). */
    private readonly onGap: (outcome: 'recovered' | 'reported') => void,
  ) {}

  /** Places a publish of this node, hands it to the subscribers here, and returns it placed (for the bus). */
  async publish(meshId: string, frame: UnplacedFrame): Promise<PlacedFrame> {
    const placed = await this.history.append(meshId, frame);
    this.accept(meshId, placed);
    return placed;
  }

  /** A publish for this node's subscribers (its own or another node's), delivered in offset order. */
  accept(meshId: string, frame: StreamData): void {
    if (frame.offset === undefined || frame.epoch === undefined) {
      this.registry.deliverHere(meshId, frame);
      return;
    }
    const key = `${meshId}\n${frame.stream}`;
    if (!this.registry.hasSubscribers(meshId, frame.stream)) {
      this.tracked.delete(key);
      return;
    }
    let tracked = this.tracked.get(key);
    if (!tracked) {
      tracked = {
        meshId,
        stream: frame.stream,
        epoch: frame.epoch,
        offset: frame.offset - 1,
        busy: false,
        pending: [],
      };
      this.tracked.set(key, tracked);
    }
    if (tracked.busy) {
      if (tracked.pending.length < PENDING_MAX) tracked.pending.push(frame);
      return;
    }
    this.step(tracked, frame);
  }

  /**
   * Joins the session to the stream (`join`) with its live frames held, reads the stream's position and,
   * with `since`, what it missed. A `since` ahead of the stream's top in its own epoch is no place the
   * stream ever had: `bad_request`, and a subscription made for it is undone (`leave`).
   */
  async subscribe(
    session: SessionIdentity,
    stream: string,
    since: StreamPosition | undefined,
    wasSubscribed: boolean,
    join: () => Promise<void>,
    leave: () => Promise<void>,
  ): Promise<StreamSubscription> {
    const { meshId, sessionId } = session;
    this.registry.hold(sessionId, stream);
    try {
      await join();
    } catch (error) {
      this.registry.release(sessionId, stream, undefined, []);
      throw error;
    }
    let read: Awaited<ReturnType<StreamHistory['read']>>;
    try {
      // A read changes nothing, so one failure (a timeout on a busy Redis, a slot moving on a cluster) is
      // tried once more before the peer is told `unavailable`.
      read = await this.history
        .read(meshId, stream, since?.offset)
        .catch(() => this.history.read(meshId, stream, since?.offset));
    } catch {
      this.registry.release(sessionId, stream, undefined, []);
      return { position: since ? { recovered: false, reason: 'unavailable' } : {}, replay: () => {} };
    }
    if (since && since.epoch === read.epoch && since.offset > read.offset) {
      this.registry.release(sessionId, stream, undefined, []);
      if (!wasSubscribed) await leave();
      throw new ProtocolError(
        'bad_request',
        `field "since": offset ${since.offset} is ahead of the stream (its top is ${read.offset})`,
      );
    }
    const key = `${meshId}\n${stream}`;
    if (!this.tracked.has(key))
      this.tracked.set(key, {
        meshId,
        stream,
        epoch: read.epoch,
        offset: read.offset,
        busy: false,
        pending: [],
      });
    const top = { offset: read.offset, epoch: read.epoch };
    const outcome = since ? recovery(since, read) : undefined;
    const frames = outcome?.recovered ? read.frames.filter((f) => f.offset <= read.offset) : [];
    return {
      position: { ...top, ...(outcome ?? {}) },
      replay: () =>
        this.registry.release(sessionId, stream, { epoch: read.epoch, through: read.offset }, frames),
    };
  }

  /**
   * One round of the position check: fills what the previous round saw published but this node never
   * delivered, then notes the tops for the next round.
   */
  async check(): Promise<void> {
    const entries: Tracked[] = [];
    for (const [key, tracked] of this.tracked) {
      if (!this.registry.hasSubscribers(tracked.meshId, tracked.stream)) this.tracked.delete(key);
      else if (!tracked.busy) entries.push(tracked);
    }
    for (const tracked of entries) {
      const suspect = tracked.suspect;
      if (!suspect || tracked.busy) continue;
      if (suspect.epoch !== tracked.epoch) {
        // A new history began and nothing of it reached this node: deliver it from its start.
        tracked.epoch = suspect.epoch;
        tracked.offset = 0;
      }
      if (suspect.offset > tracked.offset) this.fillThenDrain(tracked, suspect.offset);
    }
    // Redis unreachable: nothing to compare this round (the bus is down with it; the next round retries).
    const tops = await this.history
      .tops(entries.map(({ meshId, stream }) => ({ meshId, stream })))
      .catch(() => entries.map(() => null));
    entries.forEach((tracked, i) => {
      tracked.suspect = tops[i] ?? undefined;
    });
  }

  /** In order: once, at once, or after a fill of what it skipped. */
  private step(tracked: Tracked, frame: StreamData): void {
    const offset = frame.offset!;
    if (frame.epoch !== tracked.epoch) {
      // A new history: whatever came before it is gone (the epoch says so); this one is read from its start.
      tracked.epoch = frame.epoch!;
      tracked.offset = 0;
    }
    if (offset <= tracked.offset) return;
    if (offset === tracked.offset + 1) {
      this.registry.deliverHere(tracked.meshId, frame);
      tracked.offset = offset;
      return;
    }
    tracked.pending.unshift(frame);
    this.fillThenDrain(tracked, offset - 1);
  }

  private fillThenDrain(tracked: Tracked, upTo: number): void {
    tracked.busy = true;
    void this.fill(tracked, upTo).finally(() => {
      tracked.busy = false;
      while (!tracked.busy && tracked.pending.length > 0) this.step(tracked, tracked.pending.shift()!);
    });
  }

  /** Delivers offsets after the last delivered through `upTo` from the history; reports what it lacks. */
  private async fill(tracked: Tracked, upTo: number): Promise<void> {
    const { meshId, stream, epoch } = tracked;
    const after = tracked.offset;
    let reported = false;
    const report = (from: number, to: number, reason: StreamLossReason) => {
      if (from > to) return;
      reported = true;
      this.registry.notify(meshId, stream, { type: 'stream.gap', stream, epoch, from, to, reason });
    };
    try {
      const read = await this.history.read(meshId, stream, after);
      if (read.epoch !== epoch) {
        report(after + 1, upTo, 'epoch_changed');
      } else {
        const trimmedTo = Math.min(read.first - 1, upTo);
        report(after + 1, trimmedTo, 'history_trimmed');
        // Reported once: what follows starts after it (a gap wholly below the history is not reported twice).
        tracked.offset = Math.max(tracked.offset, trimmedTo);
        for (const frame of read.frames) {
          if (frame.offset > upTo) break;
          if (frame.offset <= tracked.offset) continue;
          this.registry.deliverHere(meshId, frame);
          tracked.offset = frame.offset;
        }
        report(tracked.offset + 1, upTo, 'history_trimmed');
      }
    } catch {
      report(tracked.offset + 1, upTo, 'unavailable');
    }
    tracked.offset = Math.max(tracked.offset, upTo);
    this.onGap(reported ? 'reported' : 'recovered');
  }
}

/** Whether the history still holds everything after `since`, and why not. */
function recovery(
  since: StreamPosition,
  read: { epoch: string; first: number },
): { recovered: boolean; reason?: StreamLossReason } {
  if (since.epoch !== read.epoch) return { recovered: false, reason: 'epoch_changed' };
  if (since.offset + 1 < read.first) return { recovered: false, reason: 'history_trimmed' };
  return { recovered: true };
}
