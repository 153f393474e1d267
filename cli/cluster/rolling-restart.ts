/**
 * A rolling restart: every node of an environment in turn is drained (its control's `stop`: SIGTERM, so
 * its peers get 1001 and reconnect through the load balancer), its sessions are waited for on the other
 * nodes, then it is started again and waited for until `/health` answers 200 `ok` (lifecycle serving)
 * before the next node goes. Nothing proceeds past a node that did not come back or whose sessions did not
 * resume within the bound: the roll stops there, naming it, so at most one node is ever out.
 *
 * Where "resumed" is read: Postgres presence (`ha.presence`, docs/presence.md), the truth of who holds
 * which session. The sessions the node held when it was drained are read first; each has resumed when its
 * row names another node and is connected again (`disconnected_at` null). A row that is gone (the grace
 * period ran out, or the peer went away) is counted as `left`: not resumed, so the wait runs to its bound
 * and fails, naming them. Without `ha.presence` there are no rows to read, so the nodes'
 * `mesh_broker_connections` gauges are summed instead: the other nodes must hold as many sessions as the
 * whole cluster did before the drain.
 */
import { createPool, type Pool } from '../../broker/db/pool.js';
import type { NodeControl, SmokeTarget } from '../smoke/context.js';

export interface RollingRestartOptions {
  target: SmokeTarget;
  control: NodeControl;
  /** How long the sessions of a drained node may take to resume elsewhere. */
  resumeTimeoutMs: number;
  /** How long a restarted node may take to answer `/health` 200. */
  healthTimeoutMs: number;
  /** Called once per node as soon as it is done (restarted, or failed). */
  onNode?: (result: NodeRestart) => void;
  /**
   * After a node is healthy, how long to wait for the load balancer to route to it again (its own checks
   * must pass: phase 3's HAProxy needs two, a second apart) before the next node drains; without that the
   * next node's sessions all land on the third node, which then drains twice the share. Not a failure
   * when it runs out (a failover load balancer never routes to a standby): the roll moves on, saying so.
   */
  lbSettleTimeoutMs?: number;
  /** Between two polls of presence, metrics or health (default 100 ms). */
  pollMs?: number;
}

export type ResumeSource = 'presence' | 'gauges';

export interface NodeRestart {
  node: string;
  ok: boolean;
  /** What the roll failed on (ok false): the step and why. */
  error?: string;
  /** Sessions it held when it was drained. */
  sessions: number;
  /** Of those, held again by another node when the wait ended. */
  resumed: number;
  /** Of those, with no presence row when the wait ended (grace ran out, peer.left sent): presence only. */
  left: number;
  source: ResumeSource;
  /** From the stop command to its exit. */
  drainMs: number;
  /** From the stop command until every session was seen resumed elsewhere (polled after its exit). */
  resumeMs: number;
  /** From the start command until `/health` answered 200. */
  startMs: number;
  /** From healthy until the load balancer routed a request to it; null when it did not in time. */
  lbMs: number | null;
  totalMs: number;
}

export interface RollingRestartResult {
  ok: boolean;
  nodes: NodeRestart[];
  totalMs: number;
}

/** Thrown by a step that did not finish: which one, for the node's line. */
class StepFailed extends Error {}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Restarts every node in turn; stops at the first node that fails (the others are not touched). */
export async function rollingRestart(options: RollingRestartOptions): Promise<RollingRestartResult> {
  const started = Date.now();
  const pool = createPool(options.target.databaseUrl, { max: 2, applicationName: 'workbench-restart' });
  pool.on('error', () => {}); // a query that fails says it already
  const nodes: NodeRestart[] = [];
  try {
    for (const node of options.target.nodes) {
      const result = await restartOne(pool, options, node.id);
      nodes.push(result);
      options.onNode?.(result);
      if (!result.ok) break;
    }
  } finally {
    await pool.end();
  }
  const ok = nodes.length === options.target.nodes.length && nodes.every((n) => n.ok);
  return { ok, nodes, totalMs: Date.now() - started };
}

/** Every node answers `/health` 200 before anything is restarted, or the node that does not is named. */
export async function checkAllHealthy(target: SmokeTarget, timeoutMs: number): Promise<string | undefined> {
  for (const node of target.nodes) {
    const status = await healthOf(node.url, timeoutMs);
    if (status !== 'ok') return `${node.id} is not healthy (${status}): nothing was restarted`;
  }
  return undefined;
}

async function restartOne(pool: Pool, options: RollingRestartOptions, id: string): Promise<NodeRestart> {
  const url = options.target.nodes.find((n) => n.id === id)!.url;
  const others = options.target.nodes.filter((n) => n.id !== id);
  const result: NodeRestart = {
    node: id,
    ok: false,
    sessions: 0,
    resumed: 0,
    left: 0,
    source: 'presence',
    drainMs: 0,
    resumeMs: 0,
    startMs: 0,
    lbMs: null,
    totalMs: 0,
  };
  const t0 = Date.now();
  try {
    const before = await sessionsBefore(pool, id, options.target.nodes);
    result.source = before.source;
    result.sessions = before.count;
    await step(`stopping ${id}`, options.control.stop(id));
    result.drainMs = Date.now() - t0;
    // The peers reconnect while the node drains; what has not resumed by its exit gets the bound.
    // Sessions that did not resume fail the roll, but the node is drained already: it is started again
    // all the same, so the roll never leaves the cluster a node short for that reason.
    const unresumed = await waitResumed(pool, before, id, others, options, result).then(
      () => undefined,
      (error: Error) => error,
    );
    result.resumeMs = Date.now() - t0;
    const t1 = Date.now();
    await step(`starting ${id}`, options.control.start(id));
    await waitServing(url, id, options);
    result.startMs = Date.now() - t1;
    result.lbMs = await waitRouted(options.target.lbUrl, id, options);
    if (unresumed) throw unresumed;
    result.ok = true;
  } catch (error) {
    result.error = (error as Error).message;
  }
  result.totalMs = Date.now() - t0;
  return result;
}

async function step(what: string, promise: Promise<void>): Promise<void> {
  try {
    await promise;
  } catch (error) {
    throw new StepFailed(`${what} failed: ${(error as Error).message}`);
  }
}

interface Before {
  source: ResumeSource;
  count: number;
  /** presence: the session ids the node held. */
  sessionIds: string[];
  /** gauges: the sessions of the whole cluster before the drain. */
  clusterTotal: number;
}

/**
 * What the node holds before its drain. Presence rows when the node has any; when it has none but its
 * gauge says it holds sessions, presence is not shared (`ha.presence` off) and the gauges are used.
 */
async function sessionsBefore(pool: Pool, id: string, nodes: SmokeTarget['nodes']): Promise<Before> {
  const rows = await pool.query<{ session_id: string }>(
    'SELECT session_id FROM presence WHERE node_id = $1 AND disconnected_at IS NULL',
    [id],
  );
  const gauges = await Promise.all(nodes.map((n) => connectionsOf(n.url)));
  const own = gauges[nodes.findIndex((n) => n.id === id)] ?? 0;
  if (rows.rows.length > 0 || own === 0) {
    const sessionIds = rows.rows.map((r) => r.session_id);
    return { source: 'presence', count: sessionIds.length, sessionIds, clusterTotal: 0 };
  }
  return { source: 'gauges', count: own, sessionIds: [], clusterTotal: gauges.reduce((a, b) => a + b, 0) };
}

/** Polls until every session of the drained node is held elsewhere; fills `resumed` and `left` as it goes. */
async function waitResumed(
  pool: Pool,
  before: Before,
  id: string,
  others: SmokeTarget['nodes'],
  options: RollingRestartOptions,
  result: NodeRestart,
): Promise<void> {
  const deadline = Date.now() + options.resumeTimeoutMs;
  for (;;) {
    const done =
      before.source === 'presence'
        ? await presenceResumed(pool, before.sessionIds, id, result)
        : await gaugesResumed(before, others, result);
    if (done) return;
    if (Date.now() > deadline)
      throw new StepFailed(
        `${id}: ${before.count - result.resumed} of its ${before.count} sessions did not resume on another node within ${options.resumeTimeoutMs / 1000} s${result.left > 0 ? ` (${result.left} of them left for good: their presence is gone, peer.left announced)` : ''} (read from ${before.source === 'presence' ? 'Postgres presence' : 'the mesh_broker_connections gauges'})`,
      );
    await sleep(options.pollMs ?? 100);
  }
}

async function presenceResumed(pool: Pool, ids: string[], id: string, result: NodeRestart): Promise<boolean> {
  if (ids.length === 0) return true;
  const { rows } = await pool.query<{ resumed: string; present: string }>(
    `SELECT count(*) FILTER (WHERE node_id <> $2 AND disconnected_at IS NULL) AS resumed, count(*) AS present
       FROM presence WHERE session_id = ANY($1::uuid[])`,
    [ids, id],
  );
  result.resumed = Number(rows[0]!.resumed);
  result.left = ids.length - Number(rows[0]!.present);
  // A session whose row is gone has not resumed: its grace ran out (peer.left went out) before it came
  // back, or its peer went away. Waited for until the bound like the others (it may still come back, as a
  // new row), then named: a roll that made sessions leave is not a clean one.
  return result.resumed === ids.length;
}

async function gaugesResumed(
  before: Before,
  others: SmokeTarget['nodes'],
  result: NodeRestart,
): Promise<boolean> {
  const held = (await Promise.all(others.map((n) => connectionsOf(n.url)))).reduce((a, b) => a + b, 0);
  result.resumed = Math.max(0, Math.min(before.count, held - (before.clusterTotal - before.count)));
  return held >= before.clusterTotal;
}

/** After the start command: `/health` 200 with status `ok` (the node serves), within the bound. */
async function waitServing(url: string, id: string, options: RollingRestartOptions): Promise<void> {
  const deadline = Date.now() + options.healthTimeoutMs;
  let last = 'no answer';
  while (Date.now() < deadline) {
    last = await healthOf(url, 5000);
    if (last === 'ok') return;
    await sleep(options.pollMs ?? 100);
  }
  throw new StepFailed(
    `${id} did not answer /health 200 within ${options.healthTimeoutMs / 1000} s after its start (last: ${last})`,
  );
}

/**
 * Until a `GET /health` through the load balancer is answered by node `id` (its body names the node),
 * the milliseconds that took; null after the bound.
 */
async function waitRouted(lbUrl: string, id: string, options: RollingRestartOptions): Promise<number | null> {
  const t0 = Date.now();
  const deadline = t0 + (options.lbSettleTimeoutMs ?? 10_000);
  while (Date.now() < deadline) {
    const node = await fetch(`${lbUrl}/health`, { signal: AbortSignal.timeout(2000) })
      .then(async (r) => ((await r.json()) as { node?: string }).node)
      .catch(() => undefined);
    if (node === id) return Date.now() - t0;
    await sleep(options.pollMs ?? 100);
  }
  return null;
}

/** `ok`, the 503's status (`starting`, `draining`, `unavailable`), or why there was no answer. */
async function healthOf(url: string, timeoutMs: number): Promise<string> {
  try {
    const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(timeoutMs) });
    const body = (await response.json().catch(() => ({}))) as { status?: string };
    return response.status === 200 ? 'ok' : `${response.status} ${body.status ?? ''}`.trim();
  } catch (error) {
    return `no answer: ${(error as Error).message}`;
  }
}

/** The node's sessions, its `mesh_broker_connections` series summed; 0 when it does not answer. */
export async function connectionsOf(url: string): Promise<number> {
  try {
    const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
    let total = 0;
    for (const match of text.matchAll(/^mesh_broker_connections(?:\{[^}]*\})? (\S+)$/gm))
      total += Number(match[1]);
    return total;
  } catch {
    return 0;
  }
}

/** One line per node: what happened and how long each step took. */
export function nodeLine(r: NodeRestart): string {
  const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  const sessions = `${r.resumed}/${r.sessions} sessions resumed${r.left > 0 ? ` (${r.left} left for good)` : ''}`;
  if (!r.ok) return `${r.node.padEnd(14)} FAILED  ${r.error}  (${sessions}, after ${s(r.totalMs)})`;
  const lb = r.lbMs === null ? 'the load balancer did not route to it yet' : `routed to in ${s(r.lbMs)}`;
  return `${r.node.padEnd(14)} restarted  drained ${s(r.drainMs)}, ${sessions} in ${s(r.resumeMs)} (${r.source}), healthy ${s(r.startMs)} after its start, ${lb}; ${s(r.totalMs)} in all`;
}
