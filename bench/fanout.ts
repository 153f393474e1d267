/**
 * a) Cross-node stream fan-out: publishers on node 1, subscribers on node 2, the same payloads, subscriber
 * counts and flow control for three systems: ours (2 brokers + Redis, `ha.streams` on), Socket.IO 4 with
 * the Redis adapter (2 servers + Redis) and the raw ws + ioredis relay (2 processes + Redis). Each system
 * gets its own redis-server. Ours runs a second time on a throw-away Redis Cluster (3 masters + 3 replicas,
 * sharded pub/sub: docs/redis-cluster.md) instead, in the same interleaved runs, so the two compare. Closed loop: each publisher keeps WINDOW messages that have not yet reached
 * every subscriber, so a faster system shows as more deliveries per second and lower latency at once.
 * Runs of the three systems are interleaved, so the machine's noise spreads over all of them.
 * CPU: the utime + stime (/proc/<pid>/stat) of the system's two server processes over the measured window,
 * per delivery (and its redis-server's, apart): what a delivery costs the server, whatever the machine's
 * load did to the rate.
 */
import { performance } from 'node:perf_hooks';
import { MeshClient } from '@mesh-broker/sdk';
import { io, type Socket } from 'socket.io-client';
import WebSocket from 'ws';
import { ThrowawayRedisCluster } from '../cli/cluster/redis-cluster.js';
import type { FlagKey } from '../flags/registry.js';
import type { Frame } from '../protocol/frames.js';
import { startOurCluster } from './lib/cluster.js';
import { cpuMeter } from './lib/cpu.js';
import { freePort, startChild, startRedis, waitUntil } from './lib/processes.js';
import { median, percentiles, round } from './lib/stats.js';

export interface Payload {
  p: number;
  q: number;
  t: number;
  pad: string;
}

interface Clients {
  subscribe(url: string, onData: (data: Payload) => void): Promise<() => void>;
  publisher(url: string): Promise<{ publish(data: Payload): void; close(): void }>;
}

export interface System {
  name:
    | 'ours'
    | 'ours-redis-cluster'
    | 'socket.io'
    | 'raw-relay'
    | 'positions-on'
    | 'positions-off'
    | 'shadow-on'
    | 'shadow-off';
  urls: [string, string];
  clients: Clients;
  /** The two server processes (brokers, Socket.IO servers, relays). */
  serverPids: number[];
  /** The system's redis-server processes (one, or every node of the Redis Cluster). */
  redisPids: number[];
}

const BASELINES = new URL('./baselines/', import.meta.url).pathname;

/**
 * Ours on its own single Redis, or on `redisCluster` (the cluster wins over the single Redis it also starts,
 * idle); `variant` names a run with other broker variables (bench/stream-positions.ts).
 */
export async function startOurs(
  redisCluster?: ThrowawayRedisCluster,
  variant?: {
    name: 'positions-on' | 'positions-off' | 'shadow-on' | 'shadow-off';
    env: Record<string, string>;
    shadow?: FlagKey[];
  },
): Promise<System> {
  const cluster = await startOurCluster(
    variant ? `fanout_${variant.name.replace('-', '_')}` : redisCluster ? 'fanout_rc' : 'fanout',
    ['ha.presence', 'ha.delivery', 'ha.streams'],
    2,
    { ...(redisCluster ? { REDIS_CLUSTER_NODES: redisCluster.nodesVariable } : {}), ...variant?.env },
    variant?.shadow,
  );
  const nodes = cluster.nodes;
  // One mesh with a member for every publisher and subscriber of the scenario.
  const plans = await cluster.members(64);
  let next = 0;
  const client = async (url: string) => {
    const plan = plans[next++];
    if (!plan) throw new Error('more than 64 bench peers per system');
    const c = new MeshClient({ urls: [url], meshId: plan.meshId, keys: plan.keys });
    await c.connect();
    return c;
  };
  return {
    name: variant?.name ?? (redisCluster ? 'ours-redis-cluster' : 'ours'),
    urls: [nodes[0]!.wsUrl, nodes[1]!.wsUrl],
    serverPids: nodes.map((n) => n.pid),
    redisPids: redisCluster ? redisCluster.pids : [cluster.redisPid],
    clients: {
      async subscribe(url, onData) {
        const c = await client(url);
        c.on('frame', (f: Frame) => {
          if (f.type === 'stream.data') onData(f.data as Payload);
        });
        await c.request({ type: 'stream.subscribe', stream: 'bench' });
        return () => c.close();
      },
      async publisher(url) {
        const c = await client(url);
        return {
          publish: (data) => c.write({ type: 'stream.publish', stream: 'bench', data }),
          close: () => c.close(),
        };
      },
    },
  };
}

async function startBaseline(name: 'socket.io' | 'raw-relay'): Promise<System> {
  const redis = await startRedis();
  const script = `${BASELINES}${name === 'socket.io' ? 'socketio-server.js' : 'raw-relay.js'}`;
  const ports = [await freePort(), await freePort()];
  const serverPids: number[] = [];
  for (const port of ports) {
    const child = startChild(process.execPath, [script], { PORT: String(port), REDIS_URL: redis.url });
    serverPids.push(child.pid);
    await waitUntil(`${name} on ${port}`, () => {
      if (child.process.exitCode !== null) throw new Error(`${name} exited:\n${child.output()}`);
      return child.output().includes('listening');
    });
  }
  if (name === 'socket.io') {
    const open = async (url: string) => {
      const socket: Socket = io(url, { transports: ['websocket'], forceNew: true, reconnection: false });
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', () => resolve());
        socket.once('connect_error', reject);
      });
      return socket;
    };
    return {
      name,
      urls: [`http://127.0.0.1:${ports[0]}`, `http://127.0.0.1:${ports[1]}`],
      serverPids,
      redisPids: [redis.child.pid],
      clients: {
        async subscribe(url, onData) {
          const socket = await open(url);
          socket.on('data', onData);
          await socket.emitWithAck('sub', 'bench');
          return () => socket.close();
        },
        async publisher(url) {
          const socket = await open(url);
          return { publish: (data) => socket.emit('pub', 'bench', data), close: () => socket.close() };
        },
      },
    };
  }
  const open = async (url: string) => {
    const socket = new WebSocket(url);
    await new Promise((resolve, reject) => {
      socket.once('open', resolve);
      socket.once('error', reject);
    });
    return socket;
  };
  return {
    name,
    urls: [`ws://127.0.0.1:${ports[0]}`, `ws://127.0.0.1:${ports[1]}`],
    serverPids,
    redisPids: [redis.child.pid],
    clients: {
      async subscribe(url, onData) {
        const socket = await open(url);
        const subscribed = new Promise((resolve) => socket.once('message', resolve));
        socket.send(JSON.stringify({ op: 'sub', ch: 'bench' }));
        await subscribed;
        socket.on('message', (raw) => onData((JSON.parse(String(raw)) as { data: Payload }).data));
        return () => socket.close();
      },
      async publisher(url) {
        const socket = await open(url);
        return {
          publish: (data) => socket.send(JSON.stringify({ op: 'pub', ch: 'bench', data })),
          close: () => socket.close(),
        };
      },
    },
  };
}

export interface FanoutOptions {
  runs: number;
  durationMs: number;
  warmupMs: number;
  publishers: number;
  subscribers: number;
  payloadBytes: number;
  window: number;
}

export interface FanoutRun {
  deliveriesPerSecond: number;
  p50: number;
  p99: number;
  /** Messages that never reached every subscriber (streams are at most once; should be 0 on loopback). */
  incomplete: number;
  /** CPU time of the two server processes in the measured window, per delivery (µs). */
  serverCpuUsPerDelivery: number;
  /** The same for the system's redis-server. */
  redisCpuUsPerDelivery: number;
  /** CPU seconds of the two server processes per second of the window (at most 2 on 2 cores). */
  serverCores: number;
}

export interface FanoutResult {
  system: System['name'];
  runs: FanoutRun[];
  medianDeliveriesPerSecond: number;
  medianP50: number;
  medianP99: number;
  medianServerCpuUsPerDelivery: number;
  medianRedisCpuUsPerDelivery: number;
  medianServerCores: number;
  /** Every latency of the median run (ms), for the plot. */
  latencies: number[];
}

export interface Rig {
  system: System;
  publishers: Array<{ publish(data: Payload): void; close(): void }>;
  closers: Array<() => void>;
  onData: (data: Payload) => void;
}

export async function rig(system: System, options: FanoutOptions): Promise<Rig> {
  const r: Rig = { system, publishers: [], closers: [], onData: () => {} };
  for (let i = 0; i < options.subscribers; i++)
    r.closers.push(await system.clients.subscribe(system.urls[1], (data) => r.onData(data)));
  for (let i = 0; i < options.publishers; i++)
    r.publishers.push(await system.clients.publisher(system.urls[0]));
  return r;
}

/** One measured run on a rig: warm-up, then DURATION of closed-loop publishing; bounded in time. */
export async function measure(
  r: Rig,
  options: FanoutOptions,
): Promise<{ run: FanoutRun; latencies: number[] }> {
  const pad = 'x'.repeat(Math.max(0, options.payloadBytes - 60));
  const inflight = r.publishers.map(() => 0);
  const seq = r.publishers.map(() => 0);
  const remaining = new Map<string, number>();
  const latencies: number[] = [];
  let deliveries = 0;
  let stopped = false;
  // Set when the window opens and closes, at the moments the CPU meters are read.
  let measureFrom = Number.POSITIVE_INFINITY;
  let measureTo = Number.POSITIVE_INFINITY;
  const pump = (p: number) => {
    while (!stopped && inflight[p]! < options.window) {
      const q = seq[p]!++;
      remaining.set(`${p}:${q}`, options.subscribers);
      inflight[p]!++;
      r.publishers[p]!.publish({ p, q, t: performance.now(), pad });
    }
  };
  r.onData = (data) => {
    const now = performance.now();
    if (now >= measureFrom && now < measureTo) {
      deliveries++;
      latencies.push(now - data.t);
    }
    const key = `${data.p}:${data.q}`;
    const left = (remaining.get(key) ?? 0) - 1;
    if (left > 0) remaining.set(key, left);
    else if (left === 0) {
      remaining.delete(key);
      inflight[data.p]!--;
      pump(data.p);
    }
  };
  for (let p = 0; p < r.publishers.length; p++) pump(p);
  await new Promise((resolve) => setTimeout(resolve, options.warmupMs));
  const serverCpu = cpuMeter(r.system.serverPids);
  const redisCpu = cpuMeter(r.system.redisPids);
  measureFrom = performance.now();
  await new Promise((resolve) => setTimeout(resolve, options.durationMs));
  measureTo = performance.now();
  const serverSeconds = serverCpu();
  const redisSeconds = redisCpu();
  stopped = true;
  // What is still on its way gets a bounded moment to land, so the next run starts clean.
  const drainEnd = performance.now() + 3000;
  while (remaining.size > 0 && performance.now() < drainEnd)
    await new Promise((resolve) => setTimeout(resolve, 20));
  const incomplete = remaining.size;
  r.onData = () => {};
  const pct = percentiles(latencies);
  const seconds = (measureTo - measureFrom) / 1000;
  const perDelivery = (cpuSeconds: number) => (deliveries ? round((cpuSeconds * 1e6) / deliveries, 2) : 0);
  return {
    run: {
      deliveriesPerSecond: Math.round(deliveries / seconds),
      p50: pct.p50,
      p99: pct.p99,
      incomplete,
      serverCpuUsPerDelivery: perDelivery(serverSeconds),
      redisCpuUsPerDelivery: perDelivery(redisSeconds),
      serverCores: round(serverSeconds / seconds, 2),
    },
    latencies,
  };
}

export async function benchFanout(options: FanoutOptions): Promise<FanoutResult[]> {
  const redisCluster = await ThrowawayRedisCluster.start();
  const rigs: Rig[] = [];
  const runs = new Map<Rig, Array<{ run: FanoutRun; latencies: number[] }>>();
  try {
    const systems = [
      await startOurs(),
      await startOurs(redisCluster),
      await startBaseline('socket.io'),
      await startBaseline('raw-relay'),
    ];
    for (const system of systems) rigs.push(await rig(system, options));
    for (const r of rigs) runs.set(r, []);
    for (let i = 0; i < options.runs; i++) for (const r of rigs) runs.get(r)!.push(await measure(r, options));
  } finally {
    for (const r of rigs) {
      for (const close of r.closers) close();
      for (const publisher of r.publishers) publisher.close();
    }
    await redisCluster.stop();
  }
  return rigs.map((r) => {
    const list = runs.get(r)!;
    const medianRate = median(list.map((x) => x.run.deliveriesPerSecond));
    const middle = [...list].sort((a, b) => a.run.deliveriesPerSecond - b.run.deliveriesPerSecond)[
      Math.floor(list.length / 2)
    ]!;
    return {
      system: r.system.name,
      runs: list.map((x) => x.run),
      medianDeliveriesPerSecond: Math.round(medianRate),
      medianP50: round(median(list.map((x) => x.run.p50))),
      medianP99: round(median(list.map((x) => x.run.p99))),
      medianServerCpuUsPerDelivery: round(median(list.map((x) => x.run.serverCpuUsPerDelivery)), 2),
      medianRedisCpuUsPerDelivery: round(median(list.map((x) => x.run.redisCpuUsPerDelivery)), 2),
      medianServerCores: round(median(list.map((x) => x.run.serverCores)), 2),
      latencies: middle.latencies,
    };
  });
}
