import { randomBytes } from 'node:crypto';
import {
  type HistoryBounds,
  type HistoryRead,
  type PlacedFrame,
  type StreamHistory,
  storedText,
  type UnplacedFrame,
} from './history.js';

interface Held {
  frame: PlacedFrame;
  at: number;
  bytes: number;
}

interface Record {
  epoch: string;
  offset: number;
  held: Held[];
  bytes: number;
}

/** What a stream's record costs beside its publishes, for the node-wide bound. */
const RECORD_BYTES = 200;

/**
 * The local row's history, in this node's memory. Bounded per stream (HistoryBounds) and over the node
 * (`nodeBytes`): past the node bound the streams written longest ago give up their oldest publishes
 * first, and a stream left with nothing is forgotten whole; its next use starts a new epoch, so no
 * subscriber mistakes the loss for continuity. Epochs are `m<boot id>-<n>`: a restarted node never repeats
 * one.
 */
export class MemoryHistory implements StreamHistory {
  /** `mesh\nstream` → record; Map order is the order streams were last appended to (oldest first). */
  private readonly records = new Map<string, Record>();
  private readonly boot = randomBytes(6).toString('hex');
  private epochs = 0;
  private bytes = 0;

  constructor(
    private readonly bounds: HistoryBounds,
    private readonly nodeBytes: number,
    private readonly now: () => number = Date.now,
  ) {}

  async append(meshId: string, frame: UnplacedFrame): Promise<PlacedFrame> {
    const key = `${meshId}\n${frame.stream}`;
    const record = this.record(key);
    // Re-inserted: the stream written last is the last the node bound takes from.
    this.records.delete(key);
    this.records.set(key, record);
    record.offset += 1;
    const placed: PlacedFrame = { ...frame, offset: record.offset, epoch: record.epoch };
    const bytes = storedText(frame).length;
    record.held.push({ frame: placed, at: this.now(), bytes });
    record.bytes += bytes;
    this.bytes += bytes;
    this.trim(record);
    this.trimNode(key);
    return placed;
  }

  async read(meshId: string, stream: string, after?: number): Promise<HistoryRead> {
    const record = this.record(`${meshId}\n${stream}`);
    this.trim(record);
    const first = record.offset - record.held.length + 1;
    const frames =
      after === undefined ? [] : record.held.filter((h) => h.frame.offset > after).map((h) => h.frame);
    return { epoch: record.epoch, offset: record.offset, first, frames };
  }

  async tops(streams: Array<{ meshId: string; stream: string }>) {
    return streams.map(({ meshId, stream }) => {
      const record = this.records.get(`${meshId}\n${stream}`);
      return record ? { epoch: record.epoch, offset: record.offset } : null;
    });
  }

  private record(key: string): Record {
    let record = this.records.get(key);
    if (!record) {
      record = { epoch: `m${this.boot}-${++this.epochs}`, offset: 0, held: [], bytes: 0 };
      this.records.set(key, record);
      this.bytes += RECORD_BYTES;
      this.trimNode(key);
    }
    return record;
  }

  /** The stream's own bounds: size, age, bytes; oldest first. */
  private trim(record: Record): void {
    const oldest = this.now() - this.bounds.ttlMs;
    while (
      record.held.length > 0 &&
      (record.held.length > this.bounds.size ||
        record.bytes > this.bounds.bytes ||
        record.held[0]!.at < oldest)
    ) {
      this.drop(record);
    }
  }

  /** The node's bound, taken from the streams appended to longest ago (never `keep`'s newest publish). */
  private trimNode(keep: string): void {
    for (const [key, record] of this.records) {
      if (this.bytes <= this.nodeBytes) return;
      while (record.held.length > (key === keep ? 1 : 0) && this.bytes > this.nodeBytes) this.drop(record);
      if (record.held.length === 0 && key !== keep) {
        this.records.delete(key);
        this.bytes -= RECORD_BYTES;
      }
    }
  }

  private drop(record: Record): void {
    const dropped = record.held.shift()!;
    record.bytes -= dropped.bytes;
    this.bytes -= dropped.bytes;
  }
}
