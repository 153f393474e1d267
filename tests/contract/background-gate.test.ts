/**
 * Contract of `BackgroundGate` (broker/rows/background-gate.ts), against AlwaysActive (one node,
 * `ha.active-lease` off) and ActiveLease (two nodes, on): `isActive` answers from local knowledge, and
 * `onChange` hears every change of answer; the local gate always says yes (every node runs its background
 * work: the warm-standby gap), the shared one only on the node holding the cluster's active lease.
 *
 * Internal, so driven through what a node shows: `/health` (`backgroundWork`), `/health/active`,
 * `mesh_broker_active_lease_held`, the node's `background.changed` events, and local background work (the
 * local scheduler: the shared world keeps `ha.schedules` and `ha.watches` off, so the gate governs them)
 * firing scheduled messages only where the gate says yes.
 */

import type { MeshClient } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import type { Frame, Message } from '../../protocol/frames.js';
import type { TestNode } from '../helpers/broker.js';
import type { TestMesh } from '../helpers/mesh.js';
import { waitFor } from '../helpers/wait.js';
import { flipSequence, useWorld, WORLDS } from './harness.js';

const LEASE_TTL_MS = 2000;

type Created = Frame & { scheduleId: string };

/** Messages of schedules a recipient gets, by scheduleId (copies have their own messageIds). */
function occurrences(client: MeshClient): Map<string, Message[]> {
  const bySchedule = new Map<string, Message[]>();
  client.on('message', (m: Message) => {
    if (m.scheduleId) bySchedule.set(m.scheduleId, [...(bySchedule.get(m.scheduleId) ?? []), m]);
  });
  return bySchedule;
}

/** `background.changed` answers a node gives from now on, until `stop()`. */
function changes(node: TestNode): boolean[] & { stop(): void } {
  const seen: boolean[] = [];
  const listener = ({ allowed }: { allowed: boolean }) => seen.push(allowed);
  node.events.on('background.changed', listener);
  return Object.assign(seen, { stop: () => void node.events.off('background.changed', listener) });
}

describe.each(WORLDS)('BackgroundGate contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.active-lease',
    // Occurrences take from the creator's send limit (issue 17): a quota above the copies fired here.
    env: {
      ACTIVE_LEASE_TTL_MS: String(LEASE_TTL_MS),
      SCHEDULE_MAX_PER_MEMBER: '1000',
      SEND_BURST: '1000',
      SEND_RATE_PER_MIN: '100000',
    },
    sharedFlags: { 'ha.schedules': false, 'ha.watches': false },
  });
  const main = () => (world.a === world.b ? [world.a] : [world.a, world.b]);

  /** How many nodes the gate lets run background work: all of them locally, exactly one on the lease. */
  const expectedActive = (nodes: TestNode[]) => (world.flagValue() ? 1 : nodes.length);

  async function activeLease(node: TestNode) {
    const response = await fetch(`${node.url}/health/active`);
    const body = (await response.json()) as { activeLease: string };
    return { activeLease: body.activeLease, status: response.status };
  }

  /**
   * A mesh whose member 0 creates schedules through `node`, member 1 receives them on A. `everything()`
   * also collects what was fired where the recipient is not connected (without `ha.delivery` an
   * occurrence fired on another node waits, owed, for the member's next hello).
   */
  async function scheduling(node: TestNode) {
    const mesh: TestMesh = await world.mesh(2);
    const recipient = await world.peer(world.a, mesh, mesh.members[1]!);
    const creator = await world.peer(node, mesh, mesh.members[0]!);
    const got = occurrences(recipient);
    const everything = async () => {
      const again = await world.peer(world.a, mesh, mesh.members[1]!);
      const owed = occurrences(again);
      const marker = await create('replay marker', 200);
      await waitFor(() => owed.has(marker) || got.has(marker), { what: 'the replay marker' });
      const all = new Map<string, Message[]>();
      for (const map of [got, owed])
        for (const [id, list] of map)
          for (const m of list)
            if (!all.get(id)?.some((x) => x.messageId === m.messageId))
              all.set(id, [...(all.get(id) ?? []), m]);
      return all;
    };
    const create = async (body: string, inMs: number) =>
      (
        await creator.request<Created>({
          type: 'schedule.create',
          to: mesh.members[1]!.pubkey,
          body,
          at: Date.now() + inMs,
        })
      ).scheduleId;
    return { got, create, everything };
  }

  it('isActive: yes on every node with the local gate; on exactly the lease holder with the shared one (/health, /health/active, metric)', async () => {
    const active = await world.activeNodes();
    expect(active).toHaveLength(expectedActive(main()));
    for (const node of main()) {
      const isActive = active.includes(node);
      const lease = await activeLease(node);
      expect(lease.activeLease).toBe(world.flagValue() ? (isActive ? 'holder' : 'standby') : 'off');
      expect(lease.status).toBe(isActive ? 200 : 503);
      expect(await world.metric(node, 'mesh_broker_active_lease_held')).toBe(
        world.flagValue() && isActive ? 1 : 0,
      );
      expect((await world.health(node)).status).toBe('ok');
    }
  });

  it('local background work runs where the gate says yes: a node that starts while schedules are pending fires them only if its gate lets it', async () => {
    const [active] = await world.activeNodes();
    const { got, create, everything } = await scheduling(active!);
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push(await create(`pending ${i}`, 1500));
    // A node that boots now re-arms every pending schedule if (and only if) it may run background work.
    const late = await world.startNode();
    try {
      const lateActive = (await world.health(late)).backgroundWork === 'active';
      expect(lateActive).toBe(!world.flagValue());
      const runners = (await world.activeNodes()).length;
      expect(runners).toBe(expectedActive([...main(), late]));
      await waitFor(() => ids.every((id) => got.has(id)), { timeoutMs: 6000, what: 'the pending schedules' });
      const marker = await create('marker', 300);
      await waitFor(() => got.has(marker), { what: 'a later schedule' });
      // One copy per node that runs background work: exactly once behind the lease.
      const all = await everything();
      expect(ids.map((id) => all.get(id)!.length)).toEqual(ids.map(() => runners));
    } finally {
      await world.stopNode(late);
    }
  });

  it('flips ha.active-lease there and back twice: background.changed is heard wherever the answer changes, work runs where it says, a schedule fires exactly once', async () => {
    const problems: string[] = [];
    for (const [i, target] of flipSequence(world).entries()) {
      const before = new Map(
        await Promise.all(
          main().map(async (n) => [n, (await world.health(n)).backgroundWork === 'active'] as const),
        ),
      );
      const heard = new Map(main().map((node) => [node, changes(node)]));
      await world.flip(target);
      const active = await world.activeNodes();
      if (active.length !== expectedActive(main()))
        problems.push(`flip ${i} (${target ? 'on' : 'off'}): ${active.length} nodes run background work`);
      for (const node of main()) {
        const now = active.includes(node);
        const events = heard.get(node)!;
        const wanted = before.get(node) === now ? [] : [now];
        if (JSON.stringify(events) !== JSON.stringify(wanted))
          problems.push(
            `flip ${i}: ${node.nodeId} went ${before.get(node)} → ${now}, background.changed ${JSON.stringify(events)}`,
          );
        events.stop();
      }
      // Local background work runs where the gate says yes: once, from the node it was created on.
      const { got, create } = await scheduling(active[0]!);
      const id = await create(`after flip ${i}`, 300);
      const marker = await create('marker', 700);
      await waitFor(() => got.has(marker), { what: `flip ${i}: the schedules` }).catch(() => {});
      if (got.get(id)?.length !== 1)
        problems.push(`flip ${i}: a schedule fired ${got.get(id)?.length ?? 0} times`);
    }
    expect(problems).toEqual([]);
  }, 60_000);

  it('onChange hears every change: when the node that may run background work stops, the others answer by themselves (a standby takes over within about the lease)', async () => {
    const late = await world.startNode();
    const others = [...main(), late];
    const [holder] = await world.activeNodes();
    const survivors = others.filter((node) => node !== holder);
    const heard = survivors.map((node) => changes(node));
    const tookOver = () =>
      Promise.all(
        survivors.map((node) =>
          world.metric(node, 'mesh_broker_active_lease_transitions_total', { to: 'holder' }),
        ),
      );
    const tookOverBefore = await tookOver();
    const stoppedAt = Date.now();
    await world.stopNode(holder!);
    if (world.flagValue()) {
      // One standby hears "allowed" and becomes the holder; the other stays a standby.
      await waitFor(() => heard.some((events) => events.includes(true)), {
        timeoutMs: 3 * LEASE_TTL_MS,
        what: 'a standby taking over',
      });
      expect(Date.now() - stoppedAt).toBeLessThan(2 * LEASE_TTL_MS);
    }
    const active = await world.activeNodes();
    expect(active.filter((node) => survivors.includes(node))).toHaveLength(expectedActive(survivors));
    expect(heard.flatMap((events) => [...events]).filter((allowed) => !allowed)).toEqual([]);
    // The takeover is counted on the node that took the lease, once (what the lease-flapping alert reads,
    // dashboards/alerts/mesh-broker.rules.yml); the local gate holds no lease and counts nothing.
    const tookOverAfter = await tookOver();
    const taken = tookOverAfter.map((after, i) => after - tookOverBefore[i]!);
    expect(taken.filter((n) => n !== 0)).toEqual(world.flagValue() ? [1] : []);
    for (const events of heard) events.stop();
    await world.stopNode(late);
  });
});
