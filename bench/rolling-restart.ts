/**
 * h) A rolling restart under load (issue 26, item 5). A phase-3 `workbench up` (three brokers behind
 * HAProxy, every row shared) on a fresh database; `sessions` SDK sessions over meshes of 50 through the load
 * balancer with DMs at `perSecond`. In the same run:
 * 1. a single-node kill (`workbench node kill broker-2`, then `node start`): each of its sessions' time
 *    from the disconnect to the next welcome (the reconnect with backoff, the hello, the presence takeover);
 * 2. `workbench restart --rolling`: the same time for every session moved by the roll (a 1001 from the
 *    draining node, reconnect at once through the load balancer).
 * Reported: both p99s and their ratio (goal ≤ 2), every session resumed (each welcome says `resumed`),
 * acknowledged DMs not delivered (goal 0), `peers.list` listing each session once, `peer.left` seen (goal
 * 0), and Postgres work per resumed session: the brokers' own round-trip counter
 * (mesh_broker_db_round_trips_total by operation, scraped from every node through the step, restarts
 * included) over the welcomes, and, as before, pg_stat_database `xact_commit` of the cluster's database
 * during the step minus the rate of the same traffic without it, node boots included. Everything on loopback; the sessions are
 * one process's sockets (5,000 clients + HAProxy's two per connection stay within a 20,000 fd limit).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import type { ClusterFile } from '../cli/cluster/local.js';
import { createLoadMeshes } from '../cli/load/setup.js';
import { NodeCounters } from './lib/node-counters.js';
import { createDatabase, WORKBENCH } from './lib/processes.js';
import { type Reconnect, SessionFleet } from './lib/session-fleet.js';
import { percentiles, round } from './lib/stats.js';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface RollingRestartBench {
  sessions: number;
  perSecond: number;
  kill: Step;
  roll: Step & { rollSeconds: number; nodes: unknown[] };
  /** p99 during the roll over the single kill's p99 (goal ≤ 2). */
  p99Ratio: number;
  ackedDms: number;
  undelivered: number;
  notResumed: number;
  listedNotOnce: number;
  peerLeft: number;
  /**
   * A second roll with the traffic stopped: the same count with only the idle cluster's own commits
   * (heartbeats, leases, reapers) to subtract, so the per-resume figure is not lost in the traffic's.
   */
  quiet: {
    resumes: number;
    commitsPerResume: number;
    idleCommitsPerSecond: number;
    roundTrips: Step['roundTrips'];
  };
  /** Background commits per second (traffic, heartbeats) subtracted from each step. */
  backgroundCommitsPerSecond: number;
  latencies: number[];
}

interface Step {
  resumes: number;
  p50: number;
  p99: number;
  max: number;
  commitsPerResume: number;
  /**
   * The brokers' own count (mesh_broker_db_round_trips_total) over the welcomes of the step: the hello's
   * admission and presence takeover, the rows' session start, the backlog read; `welcomes` (all of the
   * cluster's, `resumed` ones among them) is what they are divided by.
   */
  roundTrips: { welcomes: number; resumed: number; hello: number; session: number; backlog: number };
}

const ROUND_TRIPS = 'mesh_broker_db_round_trips_total';
const HELLOS = 'mesh_broker_hellos_accepted_total';

function roundTripCounters(nodeUrls: string[]): NodeCounters {
  return new NodeCounters(nodeUrls, {
    hello: { name: ROUND_TRIPS, labels: { operation: 'hello' } },
    session: { name: ROUND_TRIPS, labels: { operation: 'session' } },
    backlog: { name: ROUND_TRIPS, labels: { operation: 'backlog' } },
    welcomes: { name: HELLOS },
    resumed: { name: HELLOS, labels: { resumed: 'true' } },
  });
}

/** The cluster's settings: limits raised where one loopback address stands for thousands of peers. */
const ENV = {
  HELLO_PENDING_PER_ADDRESS: '20000',
  SEND_BURST: '1000',
  SEND_RATE_PER_MIN: '100000',
};

/** Its stdout; `restart` exiting 1 (a node's sessions did not resume in time) is a figure, not an error. */
async function workbench(args: string[], cwd: string): Promise<string> {
  try {
    const { stdout } = await run(process.execPath, [WORKBENCH, ...args], {
      cwd,
      env: { ...process.env, ...ENV, REDIS_URL: '' },
      maxBuffer: 16 * 1024 * 1024,
    });
    return stdout;
  } catch (error) {
    const failed = error as { code?: number; stdout?: string };
    if (args[0] === 'restart' && failed.code === 1 && failed.stdout) return failed.stdout;
    throw error;
  }
}

/** Transactions committed on the database so far (statistics are flushed at most once a second). */
async function commits(db: pg.Client): Promise<number> {
  await sleep(1200);
  await db.query('SELECT pg_stat_clear_snapshot()');
  const { rows } = await db.query(
    'SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()',
  );
  return Number(rows[0].n);
}

/** Runs `body`, counting its commits above the background rate; the reconnects it caused. */
async function measured(
  fleet: SessionFleet,
  db: pg.Client,
  nodeUrls: string[],
  rate: number,
  body: () => Promise<void>,
): Promise<{ step: Step; moved: Reconnect[]; seconds: number }> {
  const from = fleet.reconnects.length;
  const before = await commits(db);
  const counters = roundTripCounters(nodeUrls);
  await counters.start();
  const t0 = Date.now();
  await body();
  const deadline = Date.now() + 120_000;
  while (fleet.reconnecting > 0 && Date.now() < deadline) await sleep(100);
  const seconds = (Date.now() - t0) / 1000;
  const counted = await counters.stop();
  const during = (await commits(db)) - before;
  const per = (n: number) => round(n / Math.max(1, counted.welcomes!), 2);
  const moved = fleet.reconnects.slice(from);
  const times = percentiles(moved.map((r) => r.welcomedAt - r.lostAt));
  return {
    moved,
    seconds,
    step: {
      resumes: moved.length,
      p50: times.p50,
      p99: times.p99,
      max: times.max,
      commitsPerResume: round((during - rate * (seconds + 1.2)) / Math.max(1, moved.length), 2),
      roundTrips: {
        welcomes: counted.welcomes!,
        resumed: counted.resumed!,
        hello: per(counted.hello!),
        session: per(counted.session!),
        backlog: per(counted.backlog!),
      },
    },
  };
}

export async function benchRollingRestart(sessions = 5000, perSecond = 100): Promise<RollingRestartBench> {
  const databaseUrl = await createDatabase('rolling');
  const cwd = mkdtempSync(join(tmpdir(), 'wb-bench-roll-'));
  const db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  let fleet: SessionFleet | undefined;
  try {
    await workbench(['up', '--phase', '3', '--port', '0', '--database-url', databaseUrl], cwd);
    const cluster = JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile;
    const plans = await createLoadMeshes(
      { url: cluster.lb.url, token: cluster.adminToken },
      { peers: sessions, meshes: Math.ceil(sessions / 50) },
    );
    fleet = new SessionFleet(plans);
    await fleet.connect(`${cluster.lb.url.replace('http', 'ws')}/ws`, 100);
    const nodeUrls = cluster.nodes.map((node) => node.url);
    return await measureAll(fleet, db, cwd, nodeUrls, sessions, perSecond);
  } finally {
    fleet?.close();
    await workbench(['down'], cwd).catch(() => '');
    rmSync(cwd, { recursive: true, force: true });
    await db.end();
  }
}

async function measureAll(
  fleet: SessionFleet,
  db: pg.Client,
  cwd: string,
  nodeUrls: string[],
  sessions: number,
  perSecond: number,
): Promise<RollingRestartBench> {
  const traffic = fleet.traffic({ perSecond });
  const b0 = await commits(db);
  const t0 = Date.now();
  await sleep(10_000);
  const rate = ((await commits(db)) - b0) / ((Date.now() - t0) / 1000);
  const kill = await measured(fleet, db, nodeUrls, rate, async () => {
    await workbench(['node', 'kill', 'broker-2'], cwd);
    const deadline = Date.now() + 120_000;
    while (fleet.reconnecting === 0 && Date.now() < deadline) await sleep(20);
    while (fleet.reconnecting > 0 && Date.now() < deadline) await sleep(100);
    await workbench(['node', 'start', 'broker-2'], cwd);
  });
  await sleep(3000); // HAProxy's rise 2 × 1 s: broker-2 takes sessions again before the roll
  let stdout = '';
  const roll = await measured(fleet, db, nodeUrls, rate, async () => {
    stdout = await workbench(['restart', '--rolling', '--json', '--resume-timeout', '120s'], cwd);
  });
  await traffic.stop();
  const deadline = Date.now() + 60_000;
  while (fleet.undelivered() > 0 && Date.now() < deadline) await sleep(200);
  const quiet = await quietRoll(fleet, db, cwd, nodeUrls);
  const listed = await fleet.listed();
  const lines = stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { type: string });
  return {
    sessions,
    perSecond,
    kill: kill.step,
    roll: { ...roll.step, rollSeconds: round(roll.seconds), nodes: lines.filter((l) => l.type === 'node') },
    p99Ratio: round(roll.step.p99 / Math.max(1, kill.step.p99), 2),
    ackedDms: fleet.ackedCount,
    undelivered: fleet.undelivered(),
    notResumed: fleet.reconnects.filter((r) => !r.resumed).length,
    listedNotOnce: fleet.clients.filter((c) => listed.get(c.sessionId) !== 1).length,
    peerLeft: [...fleet.peerLeft.values()].reduce((a, b) => a + b, 0),
    backgroundCommitsPerSecond: round(rate),
    quiet,
    latencies: roll.moved.map((r) => r.welcomedAt - r.lostAt),
  };
}

async function quietRoll(
  fleet: SessionFleet,
  db: pg.Client,
  cwd: string,
  nodeUrls: string[],
): Promise<RollingRestartBench['quiet']> {
  const b0 = await commits(db);
  const t0 = Date.now();
  await sleep(5000);
  const idle = ((await commits(db)) - b0) / ((Date.now() - t0) / 1000);
  const roll = await measured(fleet, db, nodeUrls, idle, async () => {
    await workbench(['restart', '--rolling', '--json', '--resume-timeout', '120s'], cwd);
  });
  return {
    resumes: roll.step.resumes,
    commitsPerResume: roll.step.commitsPerResume,
    idleCommitsPerSecond: round(idle),
    roundTrips: roll.step.roundTrips,
  };
}

/** `node dist/bench/rolling-restart.js [SESSIONS] [DMS_PER_SECOND]`: one run, its figures as JSON. */
if (process.argv[1]?.endsWith('rolling-restart.js')) {
  const sessions = Number(process.argv[2] ?? 5000);
  const perSecond = Number(process.argv[3] ?? 100);
  const { latencies: _, ...result } = await benchRollingRestart(sessions, perSecond);
  console.log(JSON.stringify(result, null, 2));
  process.exit(0);
}
