/**
 * Durable cross-node DMs on 2 brokers (`ha.presence` + `ha.delivery` on): PAIRS senders on node 1, each with
 * its receiver on node 2 (one mesh per pair); receivers ack through the SDK. Latency is from the send call
 * to the receiver's listener (first deliveries, after SDK dedup).
 *
 * b) `dms`, closed loop: each sender keeps WINDOW sends awaiting their `sent` (every accepted message is in
 *    Postgres before the reply). Counted: first deliveries per second at the receivers during the measured
 *    window. One cluster for all runs.
 * b2) `dms-open`, open loop: a fixed RATE of DMs per second in total, spread round-robin over the pairs and
 *    sent on a timer without waiting for `sent`; each delivery's latency from its send call (and from the
 *    moment the schedule said to send it, which also counts the driver's own lateness), and every message
 *    sent that never arrived (lost). One cluster for all runs.
 * The open-loop driver is also the load of `retention` (bench/retention.ts).
 */
import { performance } from 'node:perf_hooks';
import { MeshClient } from '@mesh-broker/sdk';
import type { FlagKey } from '../flags/registry.js';
import { type OurCluster, startOurCluster } from './lib/cluster.js';
import { cpuMeter, postgresBackends } from './lib/cpu.js';
import { type CommitFigures, commitCounters, commitFigures } from './lib/metrics.js';
import { median, percentiles, round } from './lib/stats.js';

export interface DmRig {
  cluster: OurCluster;
  senders: MeshClient[];
  /** Pair i's receiver pubkey (the `to` of sender i). */
  targets: string[];
  /** Called with every message body a receiver's listener gets; replace it per run. */
  onBody: (body: string) => void;
  close(): void;
}

/** The cluster, members and connected clients of a DM scenario. `label`: letters only (a database name). */
export async function startDmRig(
  label: string,
  pairs: number,
  extraEnv: Record<string, string> = {},
  shadow: FlagKey[] = [],
): Promise<DmRig> {
  const cluster = await startOurCluster(label, ['ha.presence', 'ha.delivery'], 2, extraEnv, shadow);
  const [node1, node2] = cluster.nodes as [(typeof cluster.nodes)[0], (typeof cluster.nodes)[0]];
  const plans = await cluster.members(pairs * 2, pairs);
  const clients: MeshClient[] = [];
  const connect = async (i: number, url: string) => {
    const plan = plans[i]!;
    const client = new MeshClient({ urls: [url], meshId: plan.meshId, keys: plan.keys });
    clients.push(client);
    await client.connect();
    return client;
  };
  // members i and i + pairs share mesh i mod pairs.
  const senders = await Promise.all(Array.from({ length: pairs }, (_, i) => connect(i, node1.wsUrl)));
  const receivers = await Promise.all(
    Array.from({ length: pairs }, (_, i) => connect(i + pairs, node2.wsUrl)),
  );
  const rig: DmRig = {
    cluster,
    senders,
    targets: Array.from({ length: pairs }, (_, i) => plans[i + pairs]!.keys.pubkey),
    onBody: () => {},
    close: () => {
      for (const client of clients) client.close();
    },
  };
  for (const receiver of receivers) receiver.on('message', (m) => rig.onBody(m.body));
  return rig;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface DmOptions {
  runs: number;
  durationMs: number;
  warmupMs: number;
  pairs: number;
  window: number;
  /** The cluster's database label (default `dms`) and its flags at "shadow" (bench/shadow-cost.ts). */
  label?: string;
  shadow?: FlagKey[];
}

/** CPU time per delivered DM in the measured window (µs), by process: where the time goes. */
export interface DmCpu {
  /** Broker node 1 (the senders' node: accepts). */
  node1: number;
  /** Broker node 2 (the receivers' node: feeds, acks). */
  node2: number;
  redis: number;
  /** The Postgres backends of the cluster's database (not the WAL writer or checkpointer). */
  postgres: number;
  /** This process: the 16 SDK clients. */
  driver: number;
}

export interface DmResult {
  runs: Array<{
    perSecond: number;
    p50: number;
    p99: number;
    lost: number;
    commits: CommitFigures;
    cpuUsPerDm: DmCpu;
  }>;
  medianPerSecond: number;
  /** Messages per accept transaction (group commit), median of the runs' means. */
  medianAcceptBatch: number;
  medianCpuUsPerDm: DmCpu;
  medianP50: number;
  medianP99: number;
  latencies: number[];
}

export async function benchDms(options: DmOptions): Promise<DmResult> {
  const rig = await startDmRig(options.label ?? 'dms', options.pairs, {}, options.shadow);
  const urls = rig.cluster.nodes.map((n) => n.url);
  const runs: DmResult['runs'] = [];
  const allLatencies: number[][] = [];
  try {
    for (let run = 0; run < options.runs; run++) {
      const counters = await commitCounters(urls);
      const latencies: number[] = [];
      let sentOk = 0;
      let received = 0;
      let counted = 0;
      let stopped = false;
      // Set when the window opens and closes, at the moments the CPU meters are read.
      let from = Number.POSITIVE_INFINITY;
      let to = Number.POSITIVE_INFINITY;
      rig.onBody = (body) => {
        const t = (JSON.parse(body) as { t: number }).t;
        const now = performance.now();
        received++;
        if (now >= from && now < to) {
          counted++;
          latencies.push(now - t);
        }
      };
      const loop = async (i: number) => {
        while (!stopped) {
          await rig.senders[i]!.send(rig.targets[i]!, JSON.stringify({ t: performance.now() }));
          sentOk++;
        }
      };
      const loops = rig.senders.flatMap((_, i) => Array.from({ length: options.window }, () => loop(i)));
      await sleep(options.warmupMs);
      const [node1, node2] = rig.cluster.nodes.map((n) => cpuMeter([n.pid]));
      const redis = cpuMeter([rig.cluster.redisPid]);
      const postgres = cpuMeter(await postgresBackends(rig.cluster.databaseUrl));
      const driver = process.cpuUsage();
      from = performance.now();
      await sleep(options.durationMs);
      to = performance.now();
      const driverUsed = process.cpuUsage(driver);
      const seconds = [node1!(), node2!(), redis(), postgres(), (driverUsed.user + driverUsed.system) / 1e6];
      stopped = true;
      await Promise.all(loops);
      const drainEnd = performance.now() + 5000;
      while (received < sentOk && performance.now() < drainEnd) await sleep(20);
      const pct = percentiles(latencies);
      const perDm = (cpuSeconds: number) => (counted ? round((cpuSeconds * 1e6) / counted) : 0);
      runs.push({
        perSecond: Math.round(counted / ((to - from) / 1000)),
        p50: pct.p50,
        p99: pct.p99,
        lost: sentOk - received,
        commits: commitFigures(counters, await commitCounters(urls)),
        cpuUsPerDm: {
          node1: perDm(seconds[0]!),
          node2: perDm(seconds[1]!),
          redis: perDm(seconds[2]!),
          postgres: perDm(seconds[3]!),
          driver: perDm(seconds[4]!),
        },
      });
      allLatencies.push(latencies);
    }
  } finally {
    rig.close();
  }
  const middle = runs.indexOf(
    [...runs].sort((a, b) => a.perSecond - b.perSecond)[Math.floor(runs.length / 2)]!,
  );
  return {
    runs,
    medianPerSecond: Math.round(median(runs.map((r) => r.perSecond))),
    medianAcceptBatch: round(median(runs.map((r) => r.commits.meanAcceptBatch))),
    medianCpuUsPerDm: {
      node1: round(median(runs.map((r) => r.cpuUsPerDm.node1))),
      node2: round(median(runs.map((r) => r.cpuUsPerDm.node2))),
      redis: round(median(runs.map((r) => r.cpuUsPerDm.redis))),
      postgres: round(median(runs.map((r) => r.cpuUsPerDm.postgres))),
      driver: round(median(runs.map((r) => r.cpuUsPerDm.driver))),
    },
    medianP50: round(median(runs.map((r) => r.p50))),
    medianP99: round(median(runs.map((r) => r.p99))),
    latencies: allLatencies[middle]!,
  };
}

export interface OpenLoopOptions {
  /** DMs per second offered in total, over all pairs. */
  rate: number;
  warmupMs: number;
  durationMs: number;
  /** How long what is still owed after the last send may take to arrive before it counts as lost. */
  drainMs: number;
}

export interface OpenLoopRun {
  offeredPerSecond: number;
  /** Sends issued in the measured window (the latencies are theirs). */
  sent: number;
  /** Of those, delivered per second of the window. */
  deliveredPerSecond: number;
  /** Latency from the send call to the receiver's listener (ms). */
  p50: number;
  p99: number;
  max: number;
  /** From the moment the schedule said to send (send-call latency + the driver's own lateness). */
  p99FromSchedule: number;
  /** From the send call to its `sent` reply (the accept commit), ms. */
  sentP50: number;
  sentP99: number;
  /** Sends of the whole run (warm-up too) accepted (`sent`) but not delivered by the end of the drain. */
  lost: number;
  /** Sends whose reply was an error or a timeout. */
  failed: number;
  /** Messages a receiver's listener got twice (after the SDK's dedup): must be 0. */
  duplicates: number;
  /** Sends issued and delivered over the whole run. */
  totalSent: number;
  totalDelivered: number;
  /** Group commit on the brokers during the run (warm-up and drain too). */
  commits?: CommitFigures;
}

let openRun = 0;

/** One open-loop run on a rig: warm-up, the measured window, then the drain (bounded). */
export async function openLoop(
  rig: DmRig,
  options: OpenLoopOptions,
): Promise<{ run: OpenLoopRun; latencies: number[] }> {
  const runId = ++openRun;
  const pairs = rig.senders.length;
  const total = Math.ceil((options.rate * (options.warmupMs + options.durationMs)) / 1000);
  const scheduledAt = new Float64Array(total);
  const calledAt = new Float64Array(total);
  const deliveredAt = new Float64Array(total); // 0: not yet
  const accepted = new Uint8Array(total); // 1: its `sent` came back
  const latencies: number[] = [];
  const fromSchedule: number[] = [];
  const sentLatencies: number[] = [];
  let issued = 0;
  let delivered = 0;
  let duplicates = 0;
  let failed = 0;
  const start = performance.now();
  const from = start + options.warmupMs;
  const to = from + options.durationMs;
  const inWindow = (n: number) => scheduledAt[n]! >= from && scheduledAt[n]! < to;
  rig.onBody = (body) => {
    const now = performance.now();
    const { r, n } = JSON.parse(body) as { r: number; n: number };
    if (r !== runId) return; // late from an earlier run
    if (deliveredAt[n]! > 0) {
      duplicates++;
      return;
    }
    deliveredAt[n] = now;
    delivered++;
    if (inWindow(n)) {
      latencies.push(now - calledAt[n]!);
      fromSchedule.push(now - scheduledAt[n]!);
    }
  };
  const interval = 1000 / options.rate;
  // Every few ms, issue every send whose scheduled time has come (a timer cannot fire at 1 kHz exactly).
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const now = performance.now();
      while (issued < total && start + issued * interval <= now) {
        const n = issued++;
        scheduledAt[n] = start + n * interval;
        calledAt[n] = performance.now();
        rig.senders[n % pairs]!.send(
          rig.targets[n % pairs]!,
          JSON.stringify({ r: runId, n, t: calledAt[n] }),
        ).then(
          () => {
            accepted[n] = 1;
            if (inWindow(n)) sentLatencies.push(performance.now() - calledAt[n]!);
          },
          () => {
            failed++;
          },
        );
      }
      if (issued >= total) {
        clearInterval(timer);
        resolve();
      }
    }, 2);
  });
  const drainEnd = performance.now() + options.drainMs;
  while (delivered + failed < issued && performance.now() < drainEnd) await sleep(20);
  let lost = 0;
  for (let n = 0; n < issued; n++) if (accepted[n] && deliveredAt[n] === 0) lost++;
  const windowSent = scheduledAt.filter((t) => t >= from && t < to).length;
  const pct = percentiles(latencies);
  const sentPct = percentiles(sentLatencies);
  return {
    run: {
      offeredPerSecond: options.rate,
      sent: windowSent,
      deliveredPerSecond: Math.round(latencies.length / (options.durationMs / 1000)),
      p50: pct.p50,
      p99: pct.p99,
      max: pct.max,
      p99FromSchedule: percentiles(fromSchedule).p99,
      sentP50: sentPct.p50,
      sentP99: sentPct.p99,
      lost,
      failed,
      duplicates,
      totalSent: issued,
      totalDelivered: delivered,
    },
    latencies,
  };
}

export interface DmOpenOptions {
  runs: number;
  rate: number;
  warmupMs: number;
  durationMs: number;
  pairs: number;
}

export interface DmOpenResult {
  runs: OpenLoopRun[];
  offeredPerSecond: number;
  medianDeliveredPerSecond: number;
  medianP50: number;
  medianP99: number;
  medianP99FromSchedule: number;
  medianSentP99: number;
  medianAcceptBatch: number;
  /** Summed over the runs. */
  lost: number;
  failed: number;
  duplicates: number;
  latencies: number[];
}

export async function benchDmsOpen(options: DmOpenOptions): Promise<DmOpenResult> {
  const rig = await startDmRig('dmsopen', options.pairs);
  const urls = rig.cluster.nodes.map((n) => n.url);
  const list: Array<{ run: OpenLoopRun; latencies: number[] }> = [];
  try {
    for (let run = 0; run < options.runs; run++) {
      const counters = await commitCounters(urls);
      const result = await openLoop(rig, {
        rate: options.rate,
        warmupMs: options.warmupMs,
        durationMs: options.durationMs,
        drainMs: 5000,
      });
      result.run.commits = commitFigures(counters, await commitCounters(urls));
      list.push(result);
    }
  } finally {
    rig.close();
  }
  const runs = list.map((x) => x.run);
  const middle = [...list].sort((a, b) => a.run.p99 - b.run.p99)[Math.floor(list.length / 2)]!;
  const sum = (pick: (r: OpenLoopRun) => number) => runs.reduce((s, r) => s + pick(r), 0);
  return {
    runs,
    offeredPerSecond: options.rate,
    medianDeliveredPerSecond: Math.round(median(runs.map((r) => r.deliveredPerSecond))),
    medianP50: round(median(runs.map((r) => r.p50))),
    medianP99: round(median(runs.map((r) => r.p99))),
    medianP99FromSchedule: round(median(runs.map((r) => r.p99FromSchedule))),
    medianSentP99: round(median(runs.map((r) => r.sentP99))),
    medianAcceptBatch: round(median(runs.map((r) => r.commits?.meanAcceptBatch ?? 0))),
    lost: sum((r) => r.lost),
    failed: sum((r) => r.failed),
    duplicates: sum((r) => r.duplicates),
    latencies: middle.latencies,
  };
}
