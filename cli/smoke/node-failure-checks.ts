/**
 * Checks that crash (SIGKILL) or drain (SIGTERM) a node and watch the cluster carry on: peers reconnect
 * and get what was sent meanwhile, peers that failed over through the load balancer still reach the new
 * ones once the node is back, the clock keeps one strictly increasing count, a schedule still fires once,
 * a watch keeps being polled, presence stays whole. Each runs last in the suite and starts the node again
 * when it ends (SmokeContext.close). They are `skipped` where the environment gives no node control.
 */
import type { MemberKeys, MeshClient } from '@mesh-broker/sdk';
import type { Frame } from '../../protocol/frames.js';
import { type Check, CheckFailed, DELIVERY_WAIT_MS, onTwoNodes, watchTarget } from './check.js';
import { eventually, NotApplicable, SkippedByEnvironment } from './context.js';
import { ScheduleWitness, SETTLE_MS, scheduleIn } from './schedule-witness.js';

/** The stated failover time: peers of a killed node are reconnected and have what was sent meanwhile. */
export const RECONNECT_BUDGET_MS = 3000;
/** The shortest poll interval a watch may have (docs/protocol.md). */
const WATCH_INTERVAL_SEC = 5;
/** The clock's leader is replaced and ticks resume within this (the takeover goal is 2 s, plus a tick). */
const CLOCK_RESUME_BUDGET_MS = 4000;
/** Peers through the load balancer are back on a node within this of a kill (phase 1: the lease moves first). */
const LB_FAILOVER_BUDGET_MS = 10_000;
/** How long after the killed node is back new peers keep probing the load balancer (a fail-back shows within it). */
const FAILBACK_WINDOW_MS = 4000;

/** Whether a DM from `from` reaches `to` (a session of `member`) within DELIVERY_WAIT_MS. */
async function reaches(from: MeshClient, to: MeshClient, member: MemberKeys, body: string): Promise<boolean> {
  let got = false;
  const off = to.on('message', (m) => {
    if (m.body === body) got = true;
  });
  try {
    await from.send(member.pubkey, body);
    return await eventually(() => got, DELIVERY_WAIT_MS);
  } finally {
    off();
  }
}

function ticksOf(peer: MeshClient): Array<{ tick: number; epoch: number; at: number }> {
  const ticks: Array<{ tick: number; epoch: number; at: number }> = [];
  peer.on('frame', (f) => {
    if (f.type === 'clock.tick') ticks.push({ tick: Number(f.tick), epoch: Number(f.epoch), at: Date.now() });
  });
  return ticks;
}

export const NODE_FAILURE_CHECKS: Check[] = [
  {
    name: 'node-kill-reconnect',
    flag: null,
    property: 'sessions (failover)',
    needsControl: true,
    async run(context) {
      const { a, b, mesh, onA, onB } = await onTwoNodes(context, { failover: true });
      const received = new Set<string>();
      onA.on('message', (m) => received.add(m.body));
      let welcomedElsewhere = false;
      onA.on('welcome', (w) => {
        if (w.node !== a.id) welcomedElsewhere = true;
      });
      await context.kill(a.id);
      const killedAt = Date.now();
      for (const body of ['k1', 'k2', 'k3']) await onB.send(mesh.members[0]!.pubkey, body);
      const ok = await eventually(() => welcomedElsewhere && received.size === 3, RECONNECT_BUDGET_MS);
      const ms = Date.now() - killedAt;
      if (!welcomedElsewhere)
        throw new CheckFailed(
          `a peer of ${a.id} was not reconnected elsewhere within ${RECONNECT_BUDGET_MS} ms`,
        );
      if (!ok)
        throw new CheckFailed(
          `a peer of ${a.id} reconnected but had ${received.size} of 3 messages sent on ${b.id} after ${RECONNECT_BUDGET_MS} ms`,
        );
      return `reconnected with every message ${ms} ms after the kill`;
    },
  },
  {
    // Phase 1's routing (issue 16): peers fail over to the standby, which takes the active lease; the
    // primary comes back as the standby. The load balancer must not fail back to it (delivery is per node
    // there): every new peer lands where the old ones are, or (active/active) reaches them anyway.
    name: 'lb-failback-dm',
    flag: 'ha.active-lease',
    needsControl: true,
    timeoutMs: 60_000,
    async run(context) {
      if (context.target.nodes.length < 2) throw new NotApplicable('needs two nodes');
      const lb = context.target.lbUrl;
      const mesh = await context.mesh(4);
      const [memberA, memberB, memberC, memberD] = mesh.members as [
        MemberKeys,
        MemberKeys,
        MemberKeys,
        MemberKeys,
      ];
      // Old peers, connected through the load balancer as users' peers are (it is their only URL).
      const old = [
        { peer: await context.peer(lb, mesh, memberA), member: memberA },
        { peer: await context.peer(lb, mesh, memberB), member: memberB },
        { peer: await context.peer(lb, mesh, memberD), member: memberD },
      ];
      const nodes = new Set(old.map(({ peer }) => peer.node));
      if (nodes.size > 1) {
        // An active/active load balancer: old and new peers are on different nodes anyway, and a fail-back
        // is nothing new, as long as nodes deliver to each other. Where they do not, that is cross-node-dm's
        // gap, and a phase-1 topology's routing is not what this environment runs.
        const [x, y] = [old[0]!, old.find(({ peer }) => peer.node !== old[0]!.peer.node)!];
        if (!(await reaches(x.peer, y.peer, y.member, 'before')))
          throw new SkippedByEnvironment(
            `the load balancer spreads sessions over nodes (${[...nodes].join(', ')}) and they do not reach each other (cross-node-dm's gap): no fail-back to check`,
          );
      }
      const victim = old[0]!.peer.node!;
      if (!context.target.nodes.some((n) => n.id === victim))
        throw new CheckFailed(
          `the node "${victim}" the load balancer chose is not a node of the environment`,
        );
      await context.kill(victim);
      const killedAt = Date.now();
      if (
        !(await eventually(
          () => old.every(({ peer }) => peer.connected && peer.node !== victim),
          LB_FAILOVER_BUDGET_MS,
        ))
      )
        throw new CheckFailed(
          `peers of ${victim} were not reconnected elsewhere through the load balancer within ${LB_FAILOVER_BUDGET_MS} ms`,
        );
      const movedMs = Date.now() - killedAt;
      const movedTo = [...new Set(old.map(({ peer }) => peer.node))].join(', ');
      await context.start(victim);
      const backAt = Date.now();
      // New peers through the load balancer, one a second while it could fail back to the returned node:
      // each must reach the old peer that failed over, and the old peers must reach the last one.
      const landed = new Set<string>();
      let probes = 0;
      for (;;) {
        const probe = await context.peer(lb, mesh, memberC, { reconnect: false });
        probes++;
        landed.add(probe.node!);
        const after = Date.now() - backAt;
        if (!(await reaches(probe, old[0]!.peer, memberA, `probe ${probes}`)))
          throw new CheckFailed(
            `${after} ms after ${victim} came back, a new peer through the load balancer landed on ${probe.node}; its DM to a peer that failed over to ${old[0]!.peer.node} never arrived`,
          );
        if (Date.now() - backAt >= FAILBACK_WINDOW_MS) {
          if (!(await reaches(old[1]!.peer, probe, memberC, 'to the new peer')))
            throw new CheckFailed(
              `a DM from a peer on ${old[1]!.peer.node} to a new peer on ${probe.node} never arrived`,
            );
          break;
        }
        probe.close();
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
      return `${victim} killed, its peers on ${movedTo} ${movedMs} ms later; ${victim} back: ${probes} new peers on ${[...landed].join(', ')} reached them`;
    },
  },
  {
    name: 'clock-leader-kill',
    flag: 'ha.clock',
    needsControl: true,
    timeoutMs: 20_000,
    async run(context) {
      const { a, b, onA, onB } = await onTwoNodes(context, { failover: true });
      const seen = new Map([
        [onA, ticksOf(onA)],
        [onB, ticksOf(onB)],
      ]);
      await onA.request({ type: 'clock.set', speed: 10 });
      if (!(await eventually(() => [...seen.values()].some((t) => t.length >= 2), DELIVERY_WAIT_MS)))
        throw new CheckFailed('the clock does not tick');
      const status = await onA.request<Frame & { leader: string | null }>({ type: 'clock.get' });
      const leader = status.leader;
      if (!leader || !context.target.nodes.some((n) => n.id === leader))
        throw new CheckFailed(`the clock's leader "${leader}" is not a node of the environment`);
      // Whoever is left watches: a peer not on the leader's node (both, when the leader is a third node).
      const observers = [onA, onB].filter((peer) => peer.node !== leader);
      const before = Math.max(...[...seen.values()].flat().map((t) => t.tick));
      await context.kill(leader);
      const killedAt = Date.now();
      const resumed = await eventually(
        () => observers.some((peer) => seen.get(peer)!.some((t) => t.at > killedAt && t.tick > before)),
        CLOCK_RESUME_BUDGET_MS,
      );
      await onA.request({ type: 'clock.pause' }).catch(() => {});
      if (!resumed)
        throw new CheckFailed(
          `no tick past ${before} within ${CLOCK_RESUME_BUDGET_MS} ms of killing ${leader}`,
        );
      for (const peer of observers) {
        const ticks = seen.get(peer)!;
        for (let i = 1; i < ticks.length; i++) {
          if (ticks[i]!.tick <= ticks[i - 1]!.tick)
            throw new CheckFailed(
              `a peer on ${peer.node} saw tick ${ticks[i - 1]!.tick} then ${ticks[i]!.tick} across the kill of ${leader}`,
            );
        }
      }
      const first = observers
        .flatMap((peer) => seen.get(peer)!)
        .filter((t) => t.at > killedAt)
        .sort((x, y) => x.at - y.at)[0]!;
      return `${leader} killed (clock set on ${a.id}, watched on ${b.id} too); tick ${first.tick} ${first.at - killedAt} ms later`;
    },
  },
  {
    name: 'schedule-firing-node-killed',
    flag: 'ha.schedules',
    needsControl: true,
    timeoutMs: 25_000,
    async run(context) {
      if (context.target.nodes.length < 2) throw new NotApplicable('needs two nodes');
      // Created where background work runs (phase 1 routes every session to the lease holder), so the
      // check shows what a kill does, not what a standby does with a schedule created on it.
      const holder = await context.activeLeaseHolder();
      const creatorNode = context.target.nodes.find((n) => n.id === holder) ?? context.target.nodes[0]!;
      const mesh = await context.mesh(2);
      const witness = await ScheduleWitness.everywhere(context, mesh, mesh.members[1]!);
      const onA = await context.peer(context.urlsFrom(creatorNode.url), mesh, mesh.members[0]!);
      const first = await scheduleIn(onA, witness.pubkey, 500);
      if (!(await eventually(() => witness.has(first), 500 + DELIVERY_WAIT_MS)))
        throw new CheckFailed(`a schedule created on ${creatorNode.id} did not fire with every node up`);
      // Who fires: the shared scheduler records it; otherwise the node allowed to run background work
      // (the active lease's holder), otherwise the node the schedule was created on.
      const recorded = await context
        .db()
        .query<{ node: string }>('SELECT node_id AS node FROM schedule_occurrences WHERE schedule_id = $1', [
          first,
        ]);
      const firing = recorded.rows[0]?.node ?? holder ?? creatorNode.id;
      const due = [await scheduleIn(onA, witness.pubkey, 1500), await scheduleIn(onA, witness.pubkey, 2000)];
      await context.kill(firing);
      const killedAt = Date.now();
      const all = await eventually(() => due.every((id) => witness.has(id)), 2000 + 2 * DELIVERY_WAIT_MS);
      if (!all)
        throw new CheckFailed(`schedules due after ${firing} (which fires them) was killed did not fire`);
      const ms = Date.now() - killedAt;
      await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
      witness.exactlyOnce([first, ...due], `around the kill of ${firing}`);
      return `${firing} killed; the schedules due after it fired once each within ${ms} ms`;
    },
  },
  {
    name: 'watch-survives',
    flag: 'ha.watches',
    needsControl: true,
    // Up to two poll intervals and, with default timings, an owner's lease of 45 s.
    timeoutMs: 120_000,
    async run(context) {
      const host = context.target.watchTargetHost;
      if (!host)
        throw new SkippedByEnvironment('no address of this machine the nodes can fetch (watchTargetHost)');
      const [a, b] = context.target.nodes;
      if (!a || !b) throw new NotApplicable('needs two nodes');
      const target = await watchTarget(host);
      // The watch is deleted at the end, whatever the outcome, through whichever peer of its member is left.
      let cleanup: (() => Promise<unknown>) | undefined;
      try {
        const mesh = await context.mesh(1);
        const member = mesh.members[0]!;
        const creator = await context.peer(a.url, mesh, member);
        const { watchId } = await creator.request<Frame & { watchId: string }>({
          type: 'watch.create',
          url: target.url,
          mode: 'hash',
          intervalSec: WATCH_INTERVAL_SEC,
        });
        const baseline = async () =>
          (
            await context
              .db()
              .query<{ owner: string | null; checked: Date | null }>(
                'SELECT owner_node AS owner, last_checked_at AS checked FROM watches WHERE id = $1',
                [watchId],
              )
          ).rows[0];
        if (!(await eventually(async () => Boolean((await baseline())?.checked), DELIVERY_WAIT_MS)))
          throw new CheckFailed('the watch was never polled');
        // The creator goes away from a and comes back on b, same session.
        const sessionId = creator.sessionId;
        creator.close();
        const moved = await context.peer(context.urlsFrom(b.url), mesh, member, { sessionId });
        cleanup = () => moved.request({ type: 'watch.delete', watchId });
        const triggers: string[] = [];
        moved.on('watch.triggered', (t) => triggers.push(JSON.stringify(t.newValue)));
        target.change('two');
        if (!(await eventually(() => triggers.length >= 1, WATCH_INTERVAL_SEC * 1000 + DELIVERY_WAIT_MS)))
          throw new CheckFailed(
            `a change was not notified to the creator after it moved from ${a.id} to ${b.id}`,
          );
        // Its owner dies: another node polls it from where the owner left off.
        const owner = (await baseline())?.owner;
        if (!owner || !context.target.nodes.some((n) => n.id === owner))
          throw new CheckFailed(`the watch's owner "${owner}" is not a node of the environment`);
        // Another node may adopt it once the owner's lease runs out, and then polls it within an interval.
        const lease = await context
          .db()
          .query<{ leftMs: number | null }>(
            'SELECT (extract(epoch FROM lease_until - now()) * 1000)::int AS "leftMs" FROM watches WHERE id = $1',
            [watchId],
          );
        const adoptWithinMs = 2 * Math.max(0, lease.rows[0]?.leftMs ?? 0) + WATCH_INTERVAL_SEC * 1000;
        await context.kill(owner);
        const killedAt = Date.now();
        target.change('three');
        if (!(await eventually(() => triggers.length >= 2, adoptWithinMs + 2 * DELIVERY_WAIT_MS)))
          throw new CheckFailed(`a change after ${owner} (the watch's owner) died was never notified`);
        return `notified after the move, and ${Date.now() - killedAt} ms after ${owner} (its owner) was killed`;
      } finally {
        await cleanup?.().catch(() => {});
        await target.close();
      }
    },
  },
  {
    name: 'presence-after-shutdown',
    flag: 'ha.presence',
    needsControl: true,
    async run(context) {
      const [a, b, c] = context.target.nodes;
      if (!a || !b || !c) throw new NotApplicable('needs three nodes');
      const { mesh, onA, onB } = await onTwoNodes(context, { members: 3 });
      const onC = await context.peer([c.url, a.url], mesh, mesh.members[2]!);
      const left: string[] = [];
      onA.on('peer.left', (p) => left.push(p.sessionId));
      await context.stop(c.id);
      const whole = async () => {
        const peers = await onA.peers();
        const count = (sessionId: string) => peers.filter((p) => p.sessionId === sessionId).length;
        return (
          count(onB.sessionId) === 1 &&
          count(onC.sessionId) === 1 &&
          peers.find((p) => p.sessionId === onC.sessionId)?.node !== c.id
        );
      };
      if (!(await eventually(whole, RECONNECT_BUDGET_MS))) {
        const peers = await onA.peers();
        throw new CheckFailed(
          `after ${c.id} shut down, ${a.id} lists ${peers.map((p) => `${p.sessionId.slice(0, 8)}@${p.node}`).join(', ')}`,
        );
      }
      if (left.length > 0) throw new CheckFailed(`${c.id}'s drain announced ${left.length} peer(s) as left`);
      return `${c.id} drained; its peer listed once on ${onC.node}, no peer.left`;
    },
  },
];
