/**
 * Live message rates from the nodes' counters: the console scrapes each node's /metrics every poll and
 * turns the difference between two scrapes into a rate. Counters only: a rate needs no state in the
 * brokers, and a counter that went down means the node restarted (its new value is all since the start).
 * The fan-out latency histogram is read the same way: its increase between two scrapes is the histogram
 * of the deliveries made in that interval.
 */

/** The counter families the console shows as rates, by the name the page uses. */
export const RATE_COUNTERS = {
  accepted: 'mesh_broker_messages_accepted_total',
  delivered: 'mesh_broker_deliveries_total',
  streamPublishes: 'mesh_broker_stream_publishes_total',
} as const;

/** From a publish accepted on one node to its delivery by another (both kinds, message and stream). */
export const FANOUT_HISTOGRAM = 'mesh_broker_fanout_latency_seconds';

export type RateName = keyof typeof RATE_COUNTERS;
export type Rates = Record<RateName, number>;

/** A histogram's totals, every series summed (labels but `le` summed over). */
export interface HistogramTotals {
  count: number;
  sum: number;
  /** Upper bound (Infinity for `+Inf`) → cumulative count, as Prometheus exposes buckets. */
  buckets: Map<number, number>;
}

/** What one node did between two scrapes. */
export interface NodeInterval {
  /** Per second. */
  rates: Rates;
  /** The fan-out latencies observed in the interval (the increase of the histogram). */
  fanout: HistogramTotals;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;

/** The sample's value: after the labels (which may contain spaces inside quotes), before a timestamp. */
function sampleValue(line: string, name: string): number {
  return Number(
    line
      .slice(line.lastIndexOf('}') + 1 || name.length)
      .trim()
      .split(/\s+/)[0],
  );
}

/** The sum of every series of each family in a Prometheus text exposition (labels summed over). */
export function sumCounters(text: string, families: readonly string[]): Map<string, number> {
  const sums = new Map<string, number>(families.map((family) => [family, 0]));
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const name = line.match(NAME)?.[0];
    if (!name || !sums.has(name)) continue;
    const value = sampleValue(line, name);
    if (Number.isFinite(value)) sums.set(name, sums.get(name)! + value);
  }
  return sums;
}

/** A histogram family's `_count`, `_sum` and `_bucket` series, each summed over every label but `le`. */
export function sumHistogram(text: string, family: string): HistogramTotals {
  const totals = sumCounters(text, [`${family}_count`, `${family}_sum`]);
  const buckets = new Map<number, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${family}_bucket{`)) continue;
    const le = line.match(/[{,]le="([^"]*)"/)?.[1];
    const value = sampleValue(line, `${family}_bucket`);
    if (le === undefined || !Number.isFinite(value)) continue;
    const bound = le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le);
    if (!Number.isNaN(bound)) buckets.set(bound, (buckets.get(bound) ?? 0) + value);
  }
  return { count: totals.get(`${family}_count`)!, sum: totals.get(`${family}_sum`)!, buckets };
}

export const emptyHistogram = (): HistogramTotals => ({ count: 0, sum: 0, buckets: new Map() });

/** The increase from `before` to `now`; a count that went down is a restarted node (counted from 0). */
function histogramIncrease(now: HistogramTotals, before: HistogramTotals): HistogramTotals {
  if (now.count < before.count) return now;
  const buckets = new Map<number, number>();
  for (const [bound, count] of now.buckets) buckets.set(bound, count - (before.buckets.get(bound) ?? 0));
  return { count: now.count - before.count, sum: now.sum - before.sum, buckets };
}

/** Adds `more` into `into` (the cluster's histogram of an interval: every node's summed). */
export function addHistogram(into: HistogramTotals, more: HistogramTotals): void {
  into.count += more.count;
  into.sum += more.sum;
  for (const [bound, count] of more.buckets) into.buckets.set(bound, (into.buckets.get(bound) ?? 0) + count);
}

/**
 * The q-quantile of a histogram as Prometheus' histogram_quantile estimates it: linear within the bucket
 * the rank falls in (from 0 for the first); in the `+Inf` bucket, the highest finite bound. Undefined
 * when the histogram is empty.
 */
export function histogramQuantile(q: number, histogram: HistogramTotals): number | undefined {
  if (histogram.count <= 0) return undefined;
  const bounds = [...histogram.buckets.keys()].sort((a, b) => a - b);
  const rank = q * histogram.count;
  let lower = 0;
  let below = 0;
  for (const bound of bounds) {
    const cumulative = histogram.buckets.get(bound)!;
    if (cumulative >= rank) {
      if (bound === Number.POSITIVE_INFINITY) return lower;
      const inBucket = cumulative - below;
      return inBucket <= 0 ? bound : lower + ((bound - lower) * (rank - below)) / inBucket;
    }
    lower = bound;
    below = cumulative;
  }
  return lower;
}

interface Scrape {
  at: number;
  totals: Rates;
  fanout: HistogramTotals;
}

/** Per node: the last scrape, and what happened between it and the one before. */
export class RateTracker {
  private readonly last = new Map<string, Scrape>();

  /** Records a scrape of `node` taken at `at` (ms); returns its interval, or undefined for a first scrape. */
  observe(node: string, text: string, at: number): NodeInterval | undefined {
    const sums = sumCounters(text, Object.values(RATE_COUNTERS));
    const totals = Object.fromEntries(
      Object.entries(RATE_COUNTERS).map(([rate, family]) => [rate, sums.get(family) ?? 0]),
    ) as Rates;
    const fanout = sumHistogram(text, FANOUT_HISTOGRAM);
    const previous = this.last.get(node);
    this.last.set(node, { at, totals, fanout });
    if (!previous || at <= previous.at) return undefined;
    const seconds = (at - previous.at) / 1000;
    const rates = Object.fromEntries(
      Object.entries(totals).map(([rate, total]) => {
        const before = previous.totals[rate as RateName];
        const increase = total >= before ? total - before : total; // restarted: counted from 0
        return [rate, increase / seconds];
      }),
    ) as Rates;
    return { rates, fanout: histogramIncrease(fanout, previous.fanout) };
  }

  /** A node that did not answer: its next scrape starts a new series. */
  forget(node: string): void {
    this.last.delete(node);
  }
}
