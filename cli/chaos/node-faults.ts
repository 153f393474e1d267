/**
 * The chaos faults that act on one broker process of the local cluster beyond kill and drain: a pause of
 * the current leader (SIGSTOP, SIGCONT) and a restart with a skewed wall clock (libfaketime), and the
 * wait for a node's health that ends each of them.
 */
import { existsSync } from 'node:fs';
import type { Pool } from '../../broker/db/pool.js';
import { waitHealthy } from '../cluster/health.js';
import { alive, readCluster, startNode, stopNode, writeCluster } from '../cluster/local.js';
import type { PausedLeader } from './faults.js';
import { sleep } from './sleep.js';

/** Debian's libfaketime (package faketime), the multi-threaded build: Node runs threads. */
const LIBFAKETIME = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1',
];
const SKEW_VARIABLES = ['LD_PRELOAD', 'FAKETIME', 'FAKETIME_DONT_FAKE_MONOTONIC'];

function node(cwd: string, id: string) {
  const cluster = readCluster(cwd);
  const found = cluster?.nodes.find((n) => n.id === id);
  if (!cluster || !found) throw new Error(`no node ${id} in the cluster at ${cwd}`);
  return { cluster, node: found };
}

/** Resolves once the node answers `/health` (a stopped or partitioned node may take a while). */
export async function waitNodeHealthy(cwd: string, id: string, timeoutMs = 30_000): Promise<void> {
  const { node: found } = node(cwd, id);
  await waitHealthy(found.url, timeoutMs, () => !alive(found.pid));
}

/**
 * The node that leads now: the clock leader of the mesh last ticked, or the active-lease holder. Waited
 * for (up to 10 s): right after another fault (a Postgres crash) the lease may be expired and not yet
 * claimed again.
 */
async function currentLeader(pool: Pool, leader: PausedLeader): Promise<string> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const id = await leaderNow(pool, leader).catch(() => undefined);
    if (id) return id;
    if (Date.now() > deadline) throw new Error(`no ${leader} to pause (none for 10 s)`);
    await sleep(200);
  }
}

async function leaderNow(pool: Pool, leader: PausedLeader): Promise<string | undefined> {
  const { rows } =
    leader === 'clock-leader'
      ? await pool.query<{ id: string }>(
          'SELECT leader_node AS id FROM mesh_clocks WHERE leader_node IS NOT NULL ORDER BY updated_at DESC LIMIT 1',
        )
      : await pool.query<{ id: string }>(
          "SELECT holder AS id FROM cluster_leases WHERE name = 'active' AND expires_at > now()",
        );
  return rows[0]?.id;
}

/**
 * SIGSTOP of the leader for `ms` (its sockets stay open, nothing it holds is released: only timeouts and
 * fencing can take over), then SIGCONT; resolves with the node's id once it is healthy again.
 */
export async function pauseLeader(
  cwd: string,
  pool: Pool,
  leader: PausedLeader,
  ms: number,
): Promise<string> {
  const id = await currentLeader(pool, leader);
  const { node: found } = node(cwd, id);
  process.kill(found.pid, 'SIGSTOP');
  try {
    await sleep(ms);
  } finally {
    process.kill(found.pid, 'SIGCONT');
  }
  await waitNodeHealthy(cwd, id);
  return id;
}

/**
 * Restarts the node (a drain, then a start) with its wall clock moved by `skewMs` through libfaketime
 * (LD_PRELOAD; monotonic clocks left alone, so its timers run true), or with its own clock when 0. The
 * settings go into the node's `env` in cluster.json, as `workbench node start` would read them. Checks
 * the skew took: the node's HTTP `Date` header is off by it (to the header's second).
 */
export async function restartSkewed(cwd: string, id: string, skewMs: number): Promise<void> {
  const library = LIBFAKETIME.find((path) => existsSync(path));
  if (skewMs !== 0 && !library)
    throw new Error('clock-skew needs libfaketime: bash scripts/require-packages.sh faketime');
  const { cluster, node: found } = node(cwd, id);
  const env = Object.fromEntries(
    Object.entries(found.env ?? {}).filter(([name]) => !SKEW_VARIABLES.includes(name)),
  );
  if (skewMs !== 0)
    Object.assign(env, {
      LD_PRELOAD: library!,
      FAKETIME: `${skewMs > 0 ? '+' : '-'}${Math.abs(skewMs / 1000)}s`,
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
    });
  writeCluster(cwd, { ...cluster, nodes: cluster.nodes.map((n) => (n.id === id ? { ...n, env } : n)) });
  await stopNode(cwd, id, 'SIGTERM');
  await startNode(cwd, id);
  const offset = await clockOffset(found.url);
  if (Math.abs(offset - skewMs) > 1500)
    throw new Error(`${id} runs ${offset} ms off the real clock, not the ${skewMs} ms asked for`);
}

/** How far the server's `Date` header is from this process's clock (ms; whole seconds ± 1 s). */
async function clockOffset(url: string): Promise<number> {
  const before = Date.now();
  const response = await fetch(`${url}/health`);
  await response.arrayBuffer();
  const date = Date.parse(response.headers.get('date') ?? '');
  if (Number.isNaN(date)) throw new Error(`${url} sent no Date header`);
  // The header is truncated to the second: compare to the middle of that second.
  return date + 500 - (before + Date.now()) / 2;
}
