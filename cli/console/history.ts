/**
 * The console's plots: the cluster's rates of the last minutes, one sample per poll kept in a ring of a
 * fixed size (the oldest dropped), so a console left open for days holds the same few kilobytes. The
 * history lives in the console process only: a console started later begins with an empty plot.
 */
import { addHistogram, emptyHistogram, histogramQuantile, type NodeInterval } from './rates.js';

/** A fixed-size ring: `push` past the capacity drops the oldest item. */
export class Ring<T> {
  private readonly items: T[] = [];
  private next = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new Error(`a ring needs a capacity ≥ 1, got ${capacity}`);
  }

  push(item: T): void {
    if (this.items.length < this.capacity) this.items.push(item);
    else this.items[this.next] = item;
    this.next = (this.next + 1) % this.capacity;
  }

  /** Oldest first. */
  toArray(): T[] {
    return this.items.length < this.capacity
      ? [...this.items]
      : [...this.items.slice(this.next), ...this.items.slice(0, this.next)];
  }
}

/** One poll's view of the whole cluster; null where nothing was measured (no node had two scrapes). */
export interface RateSample {
  /** When the poll ran (ms since the epoch, the console's clock). */
  at: number;
  /** Messages accepted per second, summed over the live nodes. */
  accepted: number | null;
  /** Durable frames delivered to sessions per second (every path), summed over the live nodes. */
  delivered: number | null;
  /** Fan-out latency of the deliveries made since the previous poll, in ms (null: none made). */
  fanoutP95Ms: number | null;
  fanoutMeanMs: number | null;
}

/** The plotted series, column by column (what GET /api/state carries as `history`). */
export interface RateHistoryView {
  /** How far back the ring reaches at one sample per poll. */
  windowSeconds: number;
  intervalMs: number;
  at: number[];
  accepted: (number | null)[];
  delivered: (number | null)[];
  fanoutP95Ms: (number | null)[];
  fanoutMeanMs: (number | null)[];
}

const round = (value: number, digits: number) => Number(value.toFixed(digits));

/** The cluster's sample from the intervals of the nodes that answered (undefined: a first scrape). */
export function clusterSample(at: number, intervals: (NodeInterval | undefined)[]): RateSample {
  const measured = intervals.filter((interval): interval is NodeInterval => interval !== undefined);
  if (measured.length === 0)
    return { at, accepted: null, delivered: null, fanoutP95Ms: null, fanoutMeanMs: null };
  const fanout = emptyHistogram();
  for (const interval of measured) addHistogram(fanout, interval.fanout);
  const p95 = histogramQuantile(0.95, fanout);
  const sum = (pick: (interval: NodeInterval) => number) =>
    round(
      measured.reduce((total, interval) => total + pick(interval), 0),
      2,
    );
  return {
    at,
    accepted: sum((interval) => interval.rates.accepted),
    delivered: sum((interval) => interval.rates.delivered),
    fanoutP95Ms: p95 === undefined ? null : round(p95 * 1000, 2),
    fanoutMeanMs: fanout.count > 0 ? round((fanout.sum / fanout.count) * 1000, 2) : null,
  };
}

export class RateHistory {
  private readonly ring: Ring<RateSample>;

  /** `capacity` samples at one per `intervalMs`: the plots' window. */
  constructor(
    readonly capacity: number,
    readonly intervalMs: number,
  ) {
    this.ring = new Ring(capacity);
  }

  add(sample: RateSample): void {
    this.ring.push(sample);
  }

  view(): RateHistoryView {
    const samples = this.ring.toArray();
    return {
      windowSeconds: (this.capacity * this.intervalMs) / 1000,
      intervalMs: this.intervalMs,
      at: samples.map((s) => s.at),
      accepted: samples.map((s) => s.accepted),
      delivered: samples.map((s) => s.delivered),
      fanoutP95Ms: samples.map((s) => s.fanoutP95Ms),
      fanoutMeanMs: samples.map((s) => s.fanoutMeanMs),
    };
  }
}
