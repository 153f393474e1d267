/**
 * b) Durable cross-node DMs: PAIRS senders on node 1, each with its receiver on node 2 (`ha.delivery` on),
 * each sender keeping WINDOW sends awaiting their `sent` (every accepted message is in Postgres before the
 * reply). Counted: first deliveries (after SDK dedup) per second at the receivers during the measured
 * window, and each one's latency from the send call. One cluster for all runs.
 */
import { performance } from 'node:perf_hooks';
import { MeshClient } from '../client/client.js';
import { startOurCluster } from './lib/cluster.js';
import { median, percentiles, round } from './lib/stats.js';

export interface DmOptions {
  runs: number;
  durationMs: number;
  warmupMs: number;
  pairs: number;
  window: number;
}

export interface DmResult {
  runs: Array<{ perSecond: number; p50: number; p99: number; lost: number }>;
  medianPerSecond: number;
  medianP50: number;
  medianP99: number;
  latencies: number[];
}

export async function benchDms(options: DmOptions): Promise<DmResult> {
  const cluster = await startOurCluster('dms', ['ha.presence', 'ha.delivery'], 2);
  const [node1, node2] = cluster.nodes as [(typeof cluster.nodes)[0], (typeof cluster.nodes)[0]];
  const plans = await cluster.members(options.pairs * 2, options.pairs);
  const clients: MeshClient[] = [];
  const connect = async (i: number, url: string) => {
    const plan = plans[i]!;
    const client = new MeshClient({ urls: [url], meshId: plan.meshId, keys: plan.keys });
    clients.push(client);
    await client.connect();
    return client;
  };
  // members i and i + pairs share mesh i mod pairs.
  const senders = await Promise.all(Array.from({ length: options.pairs }, (_, i) => connect(i, node1.wsUrl)));
  const receivers = await Promise.all(
    Array.from({ length: options.pairs }, (_, i) => connect(i + options.pairs, node2.wsUrl)),
  );
  let onMessage = (_t: number) => {};
  for (const receiver of receivers)
    receiver.on('message', (m) => onMessage((JSON.parse(m.body) as { t: number }).t));
  const runs: DmResult['runs'] = [];
  const allLatencies: number[][] = [];
  try {
    for (let run = 0; run < options.runs; run++) {
      const latencies: number[] = [];
      let sentOk = 0;
      let received = 0;
      let counted = 0;
      let stopped = false;
      const started = performance.now();
      const from = started + options.warmupMs;
      const to = from + options.durationMs;
      onMessage = (t) => {
        const now = performance.now();
        received++;
        if (now >= from && now < to) {
          counted++;
          latencies.push(now - t);
        }
      };
      const loop = async (i: number) => {
        const target = plans[i + options.pairs]!.keys.pubkey;
        while (!stopped) {
          await senders[i]!.send(target, JSON.stringify({ t: performance.now() }));
          sentOk++;
        }
      };
      const loops = senders.flatMap((_, i) => Array.from({ length: options.window }, () => loop(i)));
      await new Promise((resolve) => setTimeout(resolve, options.warmupMs + options.durationMs));
      stopped = true;
      await Promise.all(loops);
      const drainEnd = performance.now() + 5000;
      while (received < sentOk && performance.now() < drainEnd) await new Promise((r) => setTimeout(r, 20));
      const pct = percentiles(latencies);
      runs.push({
        perSecond: Math.round(counted / (options.durationMs / 1000)),
        p50: pct.p50,
        p99: pct.p99,
        lost: sentOk - received,
      });
      allLatencies.push(latencies);
    }
  } finally {
    for (const client of clients) client.close();
  }
  const middle = runs.indexOf(
    [...runs].sort((a, b) => a.perSecond - b.perSecond)[Math.floor(runs.length / 2)]!,
  );
  return {
    runs,
    medianPerSecond: Math.round(median(runs.map((r) => r.perSecond))),
    medianP50: round(median(runs.map((r) => r.p50))),
    medianP99: round(median(runs.map((r) => r.p99))),
    latencies: allLatencies[middle]!,
  };
}
