/**
 * Checks of the cluster's background work and of its limits: a schedule fires once however many nodes run,
 * the standby of the active lease fires nothing, and the mesh cap and rate limits hold for the cluster, not
 * per node. None of them stops a node.
 */
import { type MeshClient, MeshRequestError } from '../../client/client.js';
import { type Check, CheckFailed, DELIVERY_WAIT_MS, onTwoNodes } from './check.js';
import { eventually, NotApplicable, type SmokeContext, type SmokeMesh } from './context.js';
import { ScheduleWitness, SETTLE_MS, scheduleIn } from './schedule-witness.js';

/** Opens sessions of one member on `url` until one is refused (or `max`); how many were admitted. */
async function admitUntilRefused(
  context: SmokeContext,
  url: string,
  mesh: SmokeMesh,
  max: number,
): Promise<number> {
  for (let admitted = 0; admitted < max; admitted++) {
    const refused = await context
      .peer(url, mesh, mesh.members[0]!, { reconnect: false })
      .then(() => false)
      .catch((error: Error) => {
        if (error instanceof MeshRequestError && error.message.includes('4408')) return true;
        throw error;
      });
    if (refused) return admitted;
  }
  return max;
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

export const BACKGROUND_CHECKS: Check[] = [
  {
    name: 'schedule-exactly-once',
    row: 'schedules',
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
    row: 'active lease (phase 1)',
    async run(context) {
      if (context.target.nodes.length < 2) throw new NotApplicable('needs two nodes');
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
    name: 'mesh-cap-cluster-wide',
    row: 'connection cap',
    async run(context) {
      const [a, b] = context.target.nodes;
      if (!a || !b) throw new NotApplicable('needs two nodes');
      // The cap is whatever the nodes are configured with: find it on one node, where it always holds.
      const cap = await admitUntilRefused(context, a.url, await context.mesh(1), DISCOVERY_LIMIT);
      if (cap === DISCOVERY_LIMIT)
        throw new NotApplicable(`the mesh cap is above ${DISCOVERY_LIMIT} sessions`);
      // A fresh mesh, its cap filled half on each node: one more session must be refused on either.
      const mesh = await context.mesh(1);
      const onA = await admitUntilRefused(context, a.url, mesh, Math.ceil(cap / 2));
      const onB = await admitUntilRefused(context, b.url, mesh, cap - onA);
      if (onA + onB < cap) throw new CheckFailed(`refused at ${onA + onB} sessions, below the cap of ${cap}`);
      const extra = await admitUntilRefused(context, b.url, mesh, 1);
      if (extra > 0)
        throw new CheckFailed(
          `the mesh holds ${cap + extra} sessions over two nodes with a cap of ${cap}: each node counts its own`,
        );
      return `cap ${cap}: ${onA} on ${a.id} + ${onB} on ${b.id}, one more refused`;
    },
  },
  {
    name: 'rate-limit-cluster-wide',
    row: 'rate limits',
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
