/**
 * Checks of the cluster's background work and of its limits: a schedule fires once however many nodes run,
 * the standby of the active lease fires nothing, a watch outlives the session that created it, and the mesh
 * cap and rate limits hold for the cluster, not per node. None of them stops a node.
 */
import { type MeshClient, MeshRequestError } from '@mesh-broker/sdk';
import type { Frame } from '../../protocol/frames.js';
import {
  type Check,
  CheckFailed,
  counterSum,
  DELIVERY_WAIT_MS,
  metricsOf,
  onTwoNodes,
  watchTarget,
} from './check.js';
import {
  eventually,
  NotApplicable,
  SkippedByEnvironment,
  type SmokeContext,
  type SmokeMesh,
} from './context.js';
import { ScheduleWitness, SETTLE_MS, scheduleIn } from './schedule-witness.js';

/**
 * Sessions a cap check opens at once. Each admission is atomic on its node (the local count, or the shared
 * cap's Redis script), so opening them together changes no count: it keeps a check of a 100-session cap to
 * a few seconds instead of 200 handshakes one after the other (15 s, the check's whole time, on a loaded
 * machine).
 */
const ADMISSIONS_AT_ONCE = 20;

/** Opens a session of `mesh`'s first member on `url`: whether it was admitted (false: refused as at capacity). */
async function admitted(context: SmokeContext, url: string, mesh: SmokeMesh): Promise<boolean> {
  return context
    .peer(url, mesh, mesh.members[0]!, { reconnect: false })
    .then(() => true)
    .catch((error: Error) => {
      if (error instanceof MeshRequestError && error.message.includes('4408')) return false;
      throw error;
    });
}

/** Opens sessions of one member on `url` until one is refused (or `max`); how many were admitted. */
async function admitUntilRefused(
  context: SmokeContext,
  url: string,
  mesh: SmokeMesh,
  max: number,
): Promise<number> {
  let count = 0;
  while (count < max) {
    const wave = Math.min(ADMISSIONS_AT_ONCE, max - count);
    const outcomes = await Promise.all(Array.from({ length: wave }, () => admitted(context, url, mesh)));
    count += outcomes.filter(Boolean).length;
    if (outcomes.includes(false)) return count;
  }
  return count;
}

/** How often the nodes served the connection cap locally (Redis unavailable or slow), over every node. */
async function capFallbacks(context: SmokeContext): Promise<number> {
  let total = 0;
  for (const node of context.target.nodes)
    total += counterSum(
      await metricsOf(node.url),
      'mesh_broker_redis_fallback_total',
      'row="connection-cap"',
    );
  return total;
}

/** Sends DMs until one is refused as `rate_limited` (or `max`); how many were accepted. */
async function sendUntilLimited(peer: MeshClient, to: string, max: number) {
  for (let accepted = 0; accepted < max; accepted++) {
    const limited = await peer.send(to, 'smoke').then(
      () => false,
      (error: Error) => {
        if (error instanceof MeshRequestError && error.code === 'rate_limited') return true;
        throw error;
      },
    );
    if (limited) return accepted;
  }
  return max;
}

/** The most sessions (cap discovery) or sends (rate discovery) a check tries before calling it n/a. */
const DISCOVERY_LIMIT = 300;
/** The shortest poll interval a watch may have (docs/protocol.md). */
const WATCH_INTERVAL_SEC = 5;
/** How long a closed session may stay present before it has left for good (PRESENCE_GRACE_MS is 30 s by default). */
const GRACE_WAIT_MS = 45_000;
/** How long ending a session may take to end its watches (the local runner's cleanup is one UPDATE). */
const SESSION_END_SETTLE_MS = 1000;

export const BACKGROUND_CHECKS: Check[] = [
  {
    name: 'schedule-exactly-once',
    flag: 'ha.schedules',
    needsControl: false,
    async run(context) {
      if (context.target.nodes.length < 2) throw new NotApplicable('needs two nodes');
      const mesh = await context.mesh(2);
      const witness = await ScheduleWitness.everywhere(context, mesh, mesh.members[1]!);
      // One schedule created through each node: a node that does not fire what was created elsewhere shows.
      const ids: string[] = [];
      for (const node of context.target.nodes) {
        const creator = await context.peer(node.url, mesh, mesh.members[0]!);
        ids.push(await scheduleIn(creator, witness.pubkey, 700));
      }
      const all = await eventually(() => ids.every((id) => witness.has(id)), 700 + DELIVERY_WAIT_MS);
      const missing = context.target.nodes.filter((_, i) => !witness.has(ids[i]!)).map((n) => n.id);
      if (!all) throw new CheckFailed(`schedules created on ${missing.join(', ')} did not fire`);
      await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
      witness.exactlyOnce(ids, `with ${context.target.nodes.length} nodes up`);
      return undefined;
    },
  },
  {
    name: 'standby-fires-nothing',
    flag: 'ha.active-lease',
    needsControl: false,
    async run(context) {
      if (context.target.nodes.length < 2) throw new NotApplicable('needs two nodes');
      // The lease gates only local background work (docs/active-lease.md): with shared schedules every node
      // fires, each occurrence claimed once in Postgres, and there is no standby to check.
      const first = context.target.nodes[0]!;
      const flags = (await (await fetch(`${first.url}/flags`)).json()) as {
        flags?: Record<string, { acting?: boolean }>;
      };
      if (flags.flags?.['ha.schedules']?.acting)
        throw new NotApplicable(
          'no standby: with ha.schedules on every node fires, each occurrence claimed once',
        );
      const holder = await context.activeLeaseHolder();
      if (!holder) throw new CheckFailed('no live active lease: every node runs background work');
      // Every node says whether it runs background work (schedule timers and polls, watch polls).
      const active = [];
      for (const node of context.target.nodes) {
        const health = (await (await fetch(`${node.url}/health`)).json()) as { backgroundWork?: string };
        if (health.backgroundWork !== 'standby') active.push(node.id);
      }
      if (active.length !== 1 || active[0] !== holder)
        throw new CheckFailed(
          `${active.join(', ') || 'no node'} run(s) background work; ${holder} holds the lease`,
        );
      // A schedule asked for on the holder fires, and (where the scheduler records it) on the holder.
      const mesh = await context.mesh(2);
      const witness = await ScheduleWitness.everywhere(context, mesh, mesh.members[1]!);
      const onHolder = context.target.nodes.find((node) => node.id === holder);
      if (!onHolder) throw new CheckFailed(`the lease holder "${holder}" is not a node of the environment`);
      const creator = await context.peer(onHolder.url, mesh, mesh.members[0]!);
      const scheduleId = await scheduleIn(creator, witness.pubkey, 500);
      if (!(await eventually(() => witness.has(scheduleId), 500 + DELIVERY_WAIT_MS)))
        throw new CheckFailed(`a schedule created on ${holder} did not fire`);
      const firedBy = await context
        .db()
        .query<{ node: string }>('SELECT node_id AS node FROM schedule_occurrences WHERE schedule_id = $1', [
          scheduleId,
        ]);
      const other = firedBy.rows.find((row) => row.node !== holder);
      if (other)
        throw new CheckFailed(`${other.node} fired a schedule while ${holder} holds the active lease`);
      return `background work on ${holder} only`;
    },
  },
  {
    // What the shared runner does and the local one does not, without stopping a node: a watch is its
    // member's, not its creating session's (docs/watches.md). The local runner ends it with that session.
    name: 'watch-outlives-session',
    flag: 'ha.watches',
    needsControl: false,
    // The creator's presence grace (30 s by default, 1 s in the workbench's fast timings) and one poll.
    timeoutMs: 70_000,
    async run(context) {
      const host = context.target.watchTargetHost;
      if (!host)
        throw new SkippedByEnvironment('no address of this machine the nodes can fetch (watchTargetHost)');
      // Created where background work runs: the lease holder polls it at once (a watch created on a standby
      // waits for the holder to adopt it).
      const holder = await context.activeLeaseHolder();
      const node = context.target.nodes.find((n) => n.id === holder) ?? context.target.nodes[0]!;
      const target = await watchTarget(host);
      let cleanup: (() => Promise<unknown>) | undefined;
      try {
        const mesh = await context.mesh(1);
        const member = mesh.members[0]!;
        // Two sessions of one member: the creator, which leaves, and one that stays.
        const stays = await context.peer(node.url, mesh, member);
        const creator = await context.peer(node.url, mesh, member);
        const { watchId } = await creator.request<Frame & { watchId: string }>({
          type: 'watch.create',
          url: target.url,
          mode: 'hash',
          intervalSec: WATCH_INTERVAL_SEC,
        });
        cleanup = () => stays.request({ type: 'watch.delete', watchId });
        const listed = async () =>
          (
            await stays.request<
              Frame & { watches: Array<{ watchId: string; lastCheckedAt: string | null }> }
            >({
              type: 'watch.list',
            })
          ).watches.find((watch) => watch.watchId === watchId);
        if (!(await eventually(async () => Boolean((await listed())?.lastCheckedAt), DELIVERY_WAIT_MS)))
          throw new CheckFailed(`the watch created on ${node.id} was never polled`);
        // The creating session leaves for good: closed, then its presence grace runs out (peer.left).
        const left = stays.next('peer.left', (p) => p.sessionId === creator.sessionId, GRACE_WAIT_MS);
        const closedAt = Date.now();
        creator.close();
        await left.catch(() => {
          throw new CheckFailed(`the creating session was not announced as left within ${GRACE_WAIT_MS} ms`);
        });
        const leftMs = Date.now() - closedAt;
        const triggers: string[] = [];
        stays.on('watch.triggered', (t) => triggers.push(JSON.stringify(t.newValue)));
        if (await eventually(async () => (await listed()) === undefined, SESSION_END_SETTLE_MS))
          throw new CheckFailed(
            `the watch ended with the session that created it (${leftMs} ms after it closed): the member's other session no longer lists it`,
          );
        target.change('two');
        if (!(await eventually(() => triggers.length >= 1, WATCH_INTERVAL_SEC * 1000 + DELIVERY_WAIT_MS)))
          throw new CheckFailed(
            'a change after the creating session left was not notified to the member: nothing polls the watch any more',
          );
        return `the creating session left (${leftMs} ms after it closed); the watch was still polled and notified`;
      } finally {
        await cleanup?.().catch(() => {});
        await target.close();
      }
    },
  },
  {
    name: 'mesh-cap-cluster-wide',
    flag: 'ha.connection-cap',
    needsControl: false,
    async run(context) {
      const [a, b] = context.target.nodes;
      if (!a || !b) throw new NotApplicable('needs two nodes');
      // The cap is whatever the nodes are configured with: find it on one node, where it always holds.
      const cap = await admitUntilRefused(context, a.url, await context.mesh(1), DISCOVERY_LIMIT);
      if (cap === DISCOVERY_LIMIT)
        throw new NotApplicable(`the mesh cap is above ${DISCOVERY_LIMIT} sessions`);
      // A fresh mesh, its cap filled half on each node: one more session must be refused on either. A
      // shared cap served locally for a moment (docs/connection-cap.md: Redis unavailable, or a node's
      // event loop stalled past REDIS_TIMEOUT_MS) admits like the local one: such an attempt is no verdict
      // on the flag, and is tried once more on a fresh mesh; the failure says so if it happens again.
      for (let attempt = 1; ; attempt++) {
        const mesh = await context.mesh(1);
        const fallbacksBefore = await capFallbacks(context);
        const onA = await admitUntilRefused(context, a.url, mesh, Math.ceil(cap / 2));
        const onB = await admitUntilRefused(context, b.url, mesh, cap - onA);
        if (onA + onB < cap)
          throw new CheckFailed(`refused at ${onA + onB} sessions, below the cap of ${cap}`);
        const extra = await admitUntilRefused(context, b.url, mesh, 1);
        if (extra === 0) return `cap ${cap}: ${onA} on ${a.id} + ${onB} on ${b.id}, one more refused`;
        const fallbacks = (await capFallbacks(context)) - fallbacksBefore;
        if (fallbacks === 0 || attempt === 2)
          throw new CheckFailed(
            `the mesh holds ${cap + extra} sessions over two nodes with a cap of ${cap}: each node counts its own` +
              (fallbacks > 0 ? ` (${fallbacks} admissions served locally: Redis unavailable or slow)` : ''),
          );
      }
    },
  },
  {
    name: 'rate-limit-cluster-wide',
    flag: 'ha.rate-limits',
    needsControl: false,
    async run(context) {
      const { a, b, mesh } = await onTwoNodes(context);
      const sender = mesh.members[0]!;
      const to = mesh.members[1]!.pubkey;
      // The member's quota, used up on a; then the same member on b must find it used up too.
      const onA = await context.peer(a.url, mesh, sender);
      const quota = await sendUntilLimited(onA, to, DISCOVERY_LIMIT);
      if (quota === DISCOVERY_LIMIT) throw new NotApplicable(`the send quota is above ${DISCOVERY_LIMIT}`);
      const onB = await context.peer(b.url, mesh, sender);
      const moreOnB = await sendUntilLimited(onB, to, quota);
      // A refill or two between the two loops is fair; a fresh quota on b is the per-node gap.
      if (moreOnB > Math.max(2, quota / 2))
        throw new CheckFailed(
          `a member sent ${quota} on ${a.id} until limited, then ${moreOnB} more on ${b.id}: per-node quotas`,
        );
      return `quota ${quota} on ${a.id}, ${moreOnB} more on ${b.id}`;
    },
  },
];
