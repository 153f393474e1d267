/**
 * Live message rates from the nodes' counters: the console scrapes each node's /metrics every poll and
 * turns the difference between two scrapes into a rate. Counters only: a rate needs no state in the
 * brokers, and a counter that went down means the node restarted (its new value is all since the start).
 */

/** The counter families the console shows as rates, by the name the page uses. */
export const RATE_COUNTERS = {
  accepted: 'mesh_broker_messages_accepted_total',
  delivered: 'mesh_broker_deliveries_total',
  streamPublishes: 'mesh_broker_stream_publishes_total',
} as const;

export type RateName = keyof typeof RATE_COUNTERS;
export type Rates = Record<RateName, number>;

/** The sum of every series of each family in a Prometheus text exposition (labels summed over). */
export function sumCounters(text: string, families: readonly string[]): Map<string, number> {
  const sums = new Map<string, number>(families.map((family) => [family, 0]));
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const name = line.match(/^[a-zA-Z_:][a-zA-Z0-9_:]*/)?.[0];
    if (!name || !sums.has(name)) continue;
    // The value follows the labels (which may contain spaces inside quotes): the last field but an
    // optional timestamp, which the nodes do not write.
    const value = Number(
      line
        .slice(line.lastIndexOf('}') + 1 || name.length)
        .trim()
        .split(/\s+/)[0],
    );
    if (Number.isFinite(value)) sums.set(name, sums.get(name)! + value);
  }
  return sums;
}

interface Sample {
  at: number;
  totals: Rates;
}

/** Per node: the last scrape, and the rates (per second) between it and the one before. */
export class RateTracker {
  private readonly last = new Map<string, Sample>();

  /** Records a scrape of `node` taken at `at` (ms); returns its rates, or undefined for a first scrape. */
  observe(node: string, text: string, at: number): Rates | undefined {
    const sums = sumCounters(text, Object.values(RATE_COUNTERS));
    const totals = Object.fromEntries(
      Object.entries(RATE_COUNTERS).map(([rate, family]) => [rate, sums.get(family) ?? 0]),
    ) as Rates;
    const previous = this.last.get(node);
    this.last.set(node, { at, totals });
    if (!previous || at <= previous.at) return undefined;
    const seconds = (at - previous.at) / 1000;
    return Object.fromEntries(
      Object.entries(totals).map(([rate, total]) => {
        const before = previous.totals[rate as RateName];
        const increase = total >= before ? total - before : total; // restarted: counted from 0
        return [rate, increase / seconds];
      }),
    ) as Rates;
  }

  /** A node that did not answer: its next scrape starts a new series. */
  forget(node: string): void {
    this.last.delete(node);
  }
}
