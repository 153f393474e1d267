/**
 * The sessions of this node that are resuming a stream (`stream.subscribe` with a position): while the
 * history is read their live frames of that stream wait here; on release they get the replay first, then
 * the waiting frames above it, and afterwards nothing at or below the replay's end (a publish both in the
 * history and still on its way over the bus goes out once). Bounded: HELD_MAX frames wait per session and
 * stream (a read takes milliseconds); beyond that the session is told of a gap (`overflow`) and they are
 * dropped. An entry ends with the first frame above its floor, or with the subscription.
 */
import type { StreamData } from '../../protocol/frames.js';
import type { StreamSink } from '../rows/context.js';

export const HELD_MAX = 10_000;

interface CatchUp {
  /** Frames waiting for the replay (null once released). */
  held: StreamData[] | null;
  overflow: { epoch: string; from: number; to: number } | null;
  /** After release: at or below this the session already got. */
  floor: { epoch: string; through: number } | undefined;
}

export class CatchUps {
  /** `sessionId\nstream` → its catch-up. */
  private readonly entries = new Map<string, CatchUp>();

  constructor(private readonly sink: StreamSink) {}

  any(): boolean {
    return this.entries.size > 0;
  }

  hold(sessionId: string, stream: string): void {
    this.entries.set(`${sessionId}\n${stream}`, { held: [], overflow: null, floor: undefined });
  }

  /** Whether a live frame goes to the session now (else it waits, or it already had it). */
  passes(sessionId: string, frame: StreamData): boolean {
    const key = `${sessionId}\n${frame.stream}`;
    const entry = this.entries.get(key);
    if (!entry) return true;
    if (entry.held) {
      if (entry.held.length < HELD_MAX) entry.held.push(frame);
      else if (frame.offset !== undefined && frame.epoch !== undefined) {
        const gap = entry.overflow ?? { epoch: frame.epoch, from: frame.offset, to: frame.offset };
        entry.overflow = { ...gap, to: frame.offset };
      }
      return false;
    }
    if (!below(frame, entry.floor)) {
      this.entries.delete(key);
      return true;
    }
    return false;
  }

  release(
    sessionId: string,
    stream: string,
    floor: { epoch: string; through: number } | undefined,
    replay: StreamData[],
  ): void {
    const key = `${sessionId}\n${stream}`;
    const entry = this.entries.get(key);
    if (!entry?.held) return;
    // The replay is the history up to the floor; what waited meanwhile goes out only above it.
    for (const frame of replay) if (frame.fromSession !== sessionId) this.sink([sessionId], frame);
    let through = floor;
    for (const frame of entry.held) {
      if (below(frame, through)) continue;
      this.sink([sessionId], frame);
      if (frame.offset !== undefined && frame.epoch !== undefined && frame.epoch === through?.epoch)
        through = { epoch: frame.epoch, through: Math.max(through.through, frame.offset) };
    }
    if (entry.overflow)
      this.sink([sessionId], { type: 'stream.gap', stream, ...entry.overflow, reason: 'overflow' });
    if (through) this.entries.set(key, { held: null, overflow: null, floor: through });
    else this.entries.delete(key);
  }

  forget(sessionId: string, stream: string): void {
    this.entries.delete(`${sessionId}\n${stream}`);
  }

  clear(): void {
    this.entries.clear();
  }
}

/** At or below the floor, in its epoch: already had. */
function below(frame: StreamData, floor: { epoch: string; through: number } | undefined): boolean {
  return floor !== undefined && frame.epoch === floor.epoch && (frame.offset ?? 0) <= floor.through;
}
