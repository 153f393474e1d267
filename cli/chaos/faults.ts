/**
 * The faults of a chaos run: a schedule that is a pure function of the seed (times, kinds, targets), so a
 * failing run is replayed with its seed, and the code that inflicts each one on the local cluster and its
 * throw-away services and waits for the recovery it started (a node back and healthy, Redis answering,
 * Postgres accepting connections, a flag back on, the bus no longer losing publishes).
 */
import { Random } from '../fuzz/random.js';
import { type CutEffect, PARTITION_WAYS, type PartitionWay } from './partitions.js';
import { sleep } from './sleep.js';

export const FAULT_KINDS = [
  'node-kill',
  'node-drain',
  'redis-restart',
  'redis-stall',
  'postgres-restart',
  'flag-flip',
  'bus-loss',
  'partition-postgres',
  'partition-redis',
  'partition-peers',
  'leader-pause',
  'clock-skew',
  'postgres-crash',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/**
 * Flags flipped off and on mid-run. Both promise no loss across a flip of every node at once (docs/delivery.md,
 * docs/streams.md); ha.clock and ha.schedules are left alone because a mixed cluster of them has documented
 * gaps (two clock leaders, local copies of schedules) that are not what this run judges.
 */
export const FLIPPED_FLAGS = ['ha.delivery', 'ha.streams'] as const;

/**
 * The share of bus publishes a `bus-loss` fault drops (the brokers reach Redis through the lossy proxy,
 * cli/proxies/lossy-redis-proxy.ts): each dropped one is answered `:0` as if nobody listened, no connection
 * drops, so no node notices; the feeds read what the bus lost at the next wake-up or periodic check.
 */
export const BUS_LOSS_RATE = 0.3;

/** Whom a `leader-pause` stops: the clock leader of the workload's mesh, or the active-lease holder. */
export const PAUSED_LEADERS = ['clock-leader', 'lease-holder'] as const;
export type PausedLeader = (typeof PAUSED_LEADERS)[number];

/**
 * The active lease's TTL under the chaos timings (broker/config.ts ACTIVE_LEASE_TTL_MS, default 2 s): a
 * leader-pause lasts longer, so the lease expires and another node takes it while the holder is stopped.
 */
export const LEASE_TTL_MS = 2000;

export interface Fault {
  /** When it starts, ms after the workloads started. */
  atMs: number;
  kind: FaultKind;
  /** The node (node-*, partition-*, clock-skew), the flag (flag-flip), or the leader (leader-pause). */
  target?: string;
  /** partition-*: which of the node's bytes are dropped (both ways, its outgoing, its incoming). */
  way?: PartitionWay;
  /** clock-skew: how far the node's wall clock is moved (whole seconds, ahead or behind). */
  skewMs?: number;
  /** How long the fault lasts: a node down, Redis frozen or down, a flag off, bus publishes lost. */
  holdMs: number;
}

export interface PlanOptions {
  durationMs: number;
  faults: number;
  nodes: string[];
  /** Only these kinds (`workbench chaos --kinds`; default: every kind). */
  kinds?: readonly FaultKind[];
}

export function isFaultKind(name: string): name is FaultKind {
  return (FAULT_KINDS as readonly string[]).includes(name);
}

/** No fault before this: the workloads are connected and running first. */
const WARMUP_MS = 5000;
/** The last fault starts this long before the end, so it has recovered when the workloads stop. */
const TAIL_MS = 8000;
/** Each fault gets a slot at least this long, so the cluster recovers between faults. */
export const MIN_SLOT_MS = 6000;

/** The most faults a run of this length can space out. */
export function maxFaults(durationMs: number): number {
  return Math.max(0, Math.floor((durationMs - WARMUP_MS - TAIL_MS) / MIN_SLOT_MS));
}

/**
 * How many faults a run of this length gets by default: one per 15 s, at least one of each kind, at most
 * what it can space out.
 */
export function defaultFaultCount(durationMs: number, kinds: number = FAULT_KINDS.length): number {
  return Math.min(maxFaults(durationMs), Math.max(kinds, Math.round(durationMs / 15_000)));
}

/**
 * The fault schedule: one slot per fault, the start jittered within the first third of its slot. Every
 * run of K slots (K the number of kinds: FAULT_KINDS.length, thirteen, or those of `kinds`) holds each
 * kind once (a seeded shuffle), so any run of that many faults or more has them all.
 */
export function planFaults(seed: number, options: PlanOptions): Fault[] {
  const random = new Random(seed);
  const slotMs = (options.durationMs - WARMUP_MS - TAIL_MS) / Math.max(options.faults, 1);
  const faults: Fault[] = [];
  let block: FaultKind[] = [];
  for (let i = 0; i < options.faults; i++) {
    if (block.length === 0) block = shuffle(random, [...(options.kinds ?? FAULT_KINDS)]);
    const kind = block.shift()!;
    const atMs = Math.round(WARMUP_MS + i * slotMs + random.next() * (slotMs / 3));
    faults.push({ atMs, kind, ...detail(random, kind, options.nodes) });
  }
  return faults;
}

type Detail = Pick<Fault, 'target' | 'way' | 'skewMs' | 'holdMs'>;

function detail(random: Random, kind: FaultKind, nodes: string[]): Detail {
  switch (kind) {
    case 'partition-postgres':
    case 'partition-redis':
    case 'partition-peers':
      return { target: random.pick(nodes), way: random.pick(PARTITION_WAYS), holdMs: random.int(2000, 4000) };
    case 'leader-pause':
      return {
        target: random.pick(PAUSED_LEADERS),
        holdMs: random.int(LEASE_TTL_MS + 500, 2 * LEASE_TTL_MS),
      };
    case 'clock-skew':
      return {
        target: random.pick(nodes),
        skewMs: (random.next() < 0.5 ? -1 : 1) * random.int(2, 5) * 1000,
        holdMs: random.int(3000, 6000),
      };
    case 'postgres-crash':
      return { holdMs: 0 };
    case 'node-kill':
    case 'node-drain':
      return { target: random.pick(nodes), holdMs: random.int(500, 2000) };
    case 'redis-restart':
      return { holdMs: random.int(500, 2000) };
    case 'redis-stall':
      return { holdMs: random.int(2000, 4000) };
    case 'postgres-restart':
      return { holdMs: 0 };
    case 'flag-flip':
      return { target: random.pick(FLIPPED_FLAGS), holdMs: random.int(2000, 4000) };
    case 'bus-loss':
      return { holdMs: random.int(2000, 4000) };
  }
}

/** A cut for the hold, the heal, the node healthy again; a cut that held nothing is a failed fault. */
async function partition(fault: Fault, targets: FaultTargets): Promise<string> {
  targets.cutNode(fault.target!, PATH_OF[fault.kind as keyof typeof PATH_OF], fault.way!);
  let effect: CutEffect;
  try {
    await sleep(fault.holdMs);
  } finally {
    effect = targets.healNode(fault.target!);
  }
  await targets.waitNode(fault.target!);
  if (effect.heldBytes === 0 && effect.droppedPublishes === 0)
    throw new Error('the cut held no byte and dropped no publish: it cut nothing');
  return `held ${effect.heldBytes} bytes, dropped ${effect.droppedPublishes} bus publishes`;
}

const PATH_OF = {
  'partition-postgres': 'postgres',
  'partition-redis': 'redis',
  'partition-peers': 'peers',
} as const;

function shuffle<T>(random: Random, items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = random.int(0, i);
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

export function describeFault(fault: Fault): string {
  const hold = `${(fault.holdMs / 1000).toFixed(1)} s`;
  switch (fault.kind) {
    case 'node-kill':
      return `node-kill ${fault.target} (SIGKILL, restarted after ${hold})`;
    case 'node-drain':
      return `node-drain ${fault.target} (SIGTERM, restarted after ${hold})`;
    case 'redis-restart':
      return `redis-restart (down ${hold}, back empty)`;
    case 'redis-stall':
      return `redis-stall (SIGSTOP for ${hold}, then SIGCONT)`;
    case 'postgres-restart':
      return 'postgres-restart (pg_ctl restart -m fast)';
    case 'flag-flip':
      return `flag-flip ${fault.target} (off for ${hold}, then on)`;
    case 'bus-loss':
      return `bus-loss (${BUS_LOSS_RATE * 100}% of bus publishes silently dropped for ${hold}, no disconnect)`;
    case 'partition-postgres':
    case 'partition-redis':
    case 'partition-peers':
      return `${fault.kind} ${fault.target} ${fault.way} (${WAY_WORDS[fault.way!]} held for ${hold}, no reset)`;
    case 'leader-pause':
      return `leader-pause ${fault.target} (SIGSTOP for ${hold}, longer than the ${LEASE_TTL_MS / 1000} s lease, then SIGCONT)`;
    case 'clock-skew': {
      const skew = `${fault.skewMs! > 0 ? '+' : ''}${fault.skewMs! / 1000} s`;
      return `clock-skew ${fault.target} (restarted under faketime ${skew} for ${hold}, then restarted unskewed)`;
    }
    case 'postgres-crash':
      return 'postgres-crash (SIGKILL of the postmaster, fsync on, started again: crash recovery)';
  }
}

const WAY_WORDS: Record<PartitionWay, string> = {
  both: 'both ways',
  'from-node': "only the node's outgoing bytes",
  'to-node': "only the node's incoming bytes",
};

/** What a fault acts on; run.ts provides it over the local cluster and the throw-away services. */
export interface FaultTargets {
  killNode(id: string, signal: 'SIGKILL' | 'SIGTERM'): Promise<void>;
  startNode(id: string): Promise<void>;
  stopRedis(): Promise<void>;
  startRedis(): Promise<void>;
  stallRedis(ms: number): Promise<void>;
  restartPostgres(): Promise<void>;
  setFlag(flag: string, on: boolean): Promise<void>;
  /** The share of bus publishes the brokers' Redis proxies drop (0: none). */
  setBusLoss(rate: number): void;
  /** Cuts one node's path to Postgres, to Redis, or its bus (./partitions.ts); `healNode` undoes it. */
  cutNode(id: string, path: 'postgres' | 'redis' | 'peers', way: PartitionWay): void;
  healNode(id: string): CutEffect;
  /** Resolves once the node answers `/health` again. */
  waitNode(id: string): Promise<void>;
  /** SIGSTOPs the current leader for `ms`, then SIGCONT; resolves with its node id once it is healthy. */
  pauseLeader(leader: PausedLeader, ms: number): Promise<string>;
  /** Restarts the node with its wall clock moved by `skewMs` (0: its own clock again); resolves healthy. */
  skewNode(id: string, skewMs: number): Promise<void>;
  /** SIGKILLs the Postgres postmaster and starts it again; resolves once it accepts connections. */
  crashPostgres(): Promise<void>;
}

/**
 * Inflicts one fault and undoes it; resolves when what it stopped is running again, with a note for the
 * report when there is one (the node a leader-pause stopped).
 */
export async function inflict(fault: Fault, targets: FaultTargets): Promise<string | undefined> {
  switch (fault.kind) {
    case 'partition-postgres':
    case 'partition-redis':
    case 'partition-peers':
      return await partition(fault, targets);
    case 'leader-pause':
      return `paused ${await targets.pauseLeader(fault.target as PausedLeader, fault.holdMs)}`;
    case 'clock-skew':
      await targets.skewNode(fault.target!, fault.skewMs!);
      try {
        await sleep(fault.holdMs);
      } finally {
        await targets.skewNode(fault.target!, 0);
      }
      return;
    case 'postgres-crash':
      await targets.crashPostgres();
      return;
    case 'node-kill':
    case 'node-drain':
      await targets.killNode(fault.target!, fault.kind === 'node-kill' ? 'SIGKILL' : 'SIGTERM');
      await sleep(fault.holdMs);
      await targets.startNode(fault.target!);
      return;
    case 'redis-restart':
      await targets.stopRedis();
      await sleep(fault.holdMs);
      await targets.startRedis();
      return;
    case 'redis-stall':
      await targets.stallRedis(fault.holdMs);
      return;
    case 'postgres-restart':
      await targets.restartPostgres();
      return;
    case 'flag-flip':
      await targets.setFlag(fault.target!, false);
      await sleep(fault.holdMs);
      await targets.setFlag(fault.target!, true);
      return;
    case 'bus-loss':
      targets.setBusLoss(BUS_LOSS_RATE);
      try {
        await sleep(fault.holdMs);
      } finally {
        targets.setBusLoss(0);
      }
      return;
  }
}
