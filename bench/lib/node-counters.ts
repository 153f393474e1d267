/**
 * The increase of some Prometheus counters summed over a cluster's nodes while a step runs, across node
 * restarts: each node's /metrics is scraped every `everyMs`, and a value lower than the last one seen is a
 * new process (its counters start again from 0), as Prometheus's own `increase()` reads a reset. What a
 * node counted after its last scrape before it stopped is lost: a draining node admits no hellos.
 */
import { setTimeout as sleep } from 'node:timers/promises';

/** A series to follow: the metric's name and the labels a line must carry (every other label summed). */
export interface Series {
  name: string;
  labels?: Record<string, string>;
}

function summed(text: string, series: Series): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${series.name}{`) && !line.startsWith(`${series.name} `)) continue;
    if (Object.entries(series.labels ?? {}).every(([k, v]) => line.includes(`${k}="${v}"`)))
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

export class NodeCounters {
  private readonly last = new Map<string, number>();
  private readonly increase = new Map<string, number>();
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly nodeUrls: string[],
    private readonly series: Record<string, Series>,
    private readonly everyMs = 250,
  ) {}

  /** Takes the first scrape (the baseline), then keeps scraping until `stop`. */
  async start(): Promise<void> {
    await this.scrape(true);
    this.running = (async () => {
      while (!this.stopped) {
        await sleep(this.everyMs);
        await this.scrape(false);
      }
    })();
  }

  /** One last scrape; the increase of each series since `start`, summed over the nodes. */
  async stop(): Promise<Record<string, number>> {
    this.stopped = true;
    await this.running;
    await this.scrape(false);
    const totals: Record<string, number> = {};
    for (const key of Object.keys(this.series)) {
      totals[key] = this.nodeUrls.reduce((sum, url) => sum + (this.increase.get(`${url} ${key}`) ?? 0), 0);
    }
    return totals;
  }

  private async scrape(baseline: boolean): Promise<void> {
    await Promise.all(
      this.nodeUrls.map(async (url) => {
        // A node being restarted does not answer: its next answer tells what it counted since.
        const text = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(2000) })
          .then((response) => (response.ok ? response.text() : undefined))
          .catch(() => undefined);
        if (text === undefined) return;
        for (const [key, series] of Object.entries(this.series)) {
          const id = `${url} ${key}`;
          const value = summed(text, series);
          const last = this.last.get(id);
          this.last.set(id, value);
          if (baseline) continue;
          // No baseline yet (the node was down at start) or a restart: everything it counted is new.
          const grew = last === undefined || value < last ? value : value - last;
          this.increase.set(id, (this.increase.get(id) ?? 0) + grew);
        }
      }),
    );
  }
}
