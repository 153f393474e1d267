/**
 * d) Failover, each measured from the SIGKILL (as tests/cluster/ha-clock.test.ts and
 * ha-active-lease.test.ts do): (1) every peer of the killed node reconnected to the other node and
 * welcomed there (its session resumed: the broker replays what it owes); (2) the first clock tick of a
 * new leader's epoch seen by a peer on the survivor; (3) a standby's /health saying `active`. After each
 * kill a replacement node starts, so every run kills one of two live nodes. Short timings of the cluster
 * tests (FAST_CLUSTER) on both clusters.
 */
import { performance } from 'node:perf_hooks';
import { MeshClient } from '@mesh-broker/sdk';
import { FAST_CLUSTER } from '../cli/cluster/fast-timings.js';
import type { Frame } from '../protocol/frames.js';
import { type OurCluster, startOurCluster } from './lib/cluster.js';
import type { Broker } from './lib/processes.js';
import { median, percentiles, round } from './lib/stats.js';

const FAST = { ...FAST_CLUSTER, CLOCK_TICK_MS: '100' };

export interface FailoverResult {
  reconnect: {
    runs: Array<{ p50: number; p99: number; resumed: number }>;
    medianP50: number;
    medianP99: number;
  };
  clockTakeoverMs: { runs: number[]; median: number };
  standbyTakeoverMs: { runs: number[]; median: number };
  /** Reconnect times of every peer over all runs (ms), for the plot. */
  latencies: number[];
}

const alive = (cluster: OurCluster) =>
  cluster.nodes.filter((n) => n.process.exitCode === null && n.process.signalCode === null);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function within<T>(what: string, ms: number, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function reconnectRun(cluster: OurCluster, peers: number, run: number) {
  const [victim, survivor] = alive(cluster) as [Broker, Broker];
  const plans = await cluster.members(peers, Math.max(1, Math.ceil(peers / 50)));
  const clients = plans.map(
    (plan) =>
      new MeshClient({
        urls: [victim.wsUrl, survivor.wsUrl],
        meshId: plan.meshId,
        keys: plan.keys,
        backoff: { initialMs: 100, maxMs: 2000 },
      }),
  );
  try {
    await Promise.all(clients.map((c) => c.connect()));
    let killedAt = 0;
    const welcomed = clients.map(
      (c) =>
        new Promise<{ ms: number; resumed: boolean }>((resolve) => {
          c.on('welcome', (w) => {
            if (killedAt > 0)
              resolve({ ms: performance.now() - killedAt, resumed: w.resumed && w.node === survivor.id });
          });
        }),
    );
    killedAt = performance.now();
    await victim.kill('SIGKILL');
    const results = await within('every peer reconnected', 15_000, Promise.all(welcomed));
    await cluster.start(`failover-r${run}`);
    return results;
  } finally {
    for (const c of clients) c.close();
  }
}

async function clockRun(cluster: OurCluster, run: number): Promise<number> {
  const nodes = alive(cluster);
  const plans = await cluster.members(2);
  const clients = plans.map(
    (plan, i) =>
      new MeshClient({ urls: [nodes[i]!.wsUrl], meshId: plan.meshId, keys: plan.keys, reconnect: false }),
  );
  try {
    await Promise.all(clients.map((c) => c.connect()));
    await clients[0]!.request({ type: 'clock.set', speed: 10 });
    await sleep(300);
    const status = await clients[0]!.request<Frame & { leader: string; epoch: number }>({
      type: 'clock.get',
    });
    const leaderIndex = nodes.findIndex((n) => n.id === status.leader);
    if (leaderIndex < 0) throw new Error(`clock leader ${status.leader} is not a live node`);
    const watcher = clients[1 - leaderIndex]!;
    let killedAt = 0;
    const newEpoch = new Promise<number>((resolve) => {
      watcher.on('frame', (f) => {
        if (f.type === 'clock.tick' && killedAt > 0 && Number(f.epoch) > status.epoch)
          resolve(performance.now() - killedAt);
      });
    });
    killedAt = performance.now();
    await nodes[leaderIndex]!.kill('SIGKILL');
    const ms = await within('clock takeover', 15_000, newEpoch);
    await cluster.start(`clock-r${run}`);
    return ms;
  } finally {
    for (const c of clients) c.close();
  }
}

const backgroundWork = async (node: Broker) =>
  ((await (await fetch(`${node.url}/health`)).json()) as { backgroundWork?: string }).backgroundWork;

async function standbyRun(cluster: OurCluster, run: number): Promise<number> {
  const nodes = alive(cluster);
  const states = await Promise.all(nodes.map(backgroundWork));
  const active = nodes[states.indexOf('active')];
  const standby = nodes[states.indexOf('standby')];
  if (!active || !standby)
    throw new Error(`expected one active and one standby node, got ${states.join(', ')}`);
  const killedAt = performance.now();
  await active.kill('SIGKILL');
  const deadline = killedAt + 15_000;
  while ((await backgroundWork(standby).catch(() => undefined)) !== 'active') {
    if (performance.now() > deadline) throw new Error('standby takeover: not within 15000 ms');
    await sleep(10);
  }
  const ms = performance.now() - killedAt;
  await cluster.start(`standby-r${run}`);
  // The replacement must settle as the standby before the next kill.
  const replacement = alive(cluster).at(-1)!;
  const settleEnd = performance.now() + 10_000;
  while ((await backgroundWork(replacement)) !== 'standby' && performance.now() < settleEnd) await sleep(50);
  return ms;
}

export async function benchFailover(options: { runs: number; peers: number }): Promise<FailoverResult> {
  const ha = await startOurCluster('failover', ['ha.presence', 'ha.delivery', 'ha.clock'], 2, FAST);
  const reconnect: FailoverResult['reconnect']['runs'] = [];
  const latencies: number[] = [];
  for (let run = 0; run < options.runs; run++) {
    const results = await reconnectRun(ha, options.peers, run);
    const pct = percentiles(results.map((r) => r.ms));
    latencies.push(...results.map((r) => r.ms));
    reconnect.push({ p50: pct.p50, p99: pct.p99, resumed: results.filter((r) => r.resumed).length });
  }
  const clock: number[] = [];
  for (let run = 0; run < options.runs; run++) clock.push(Math.round(await clockRun(ha, run)));
  const lease = await startOurCluster('standby', ['ha.presence', 'ha.active-lease'], 0, FAST);
  await lease.start('lease-1');
  const settleEnd = performance.now() + 10_000;
  while ((await backgroundWork(lease.nodes[0]!)) !== 'active' && performance.now() < settleEnd)
    await sleep(50);
  await lease.start('lease-2');
  const standby: number[] = [];
  for (let run = 0; run < options.runs; run++) standby.push(Math.round(await standbyRun(lease, run)));
  return {
    reconnect: {
      runs: reconnect,
      medianP50: round(median(reconnect.map((r) => r.p50))),
      medianP99: round(median(reconnect.map((r) => r.p99))),
    },
    clockTakeoverMs: { runs: clock, median: median(clock) },
    standbyTakeoverMs: { runs: standby, median: median(standby) },
    latencies,
  };
}
