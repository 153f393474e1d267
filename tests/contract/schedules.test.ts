/**
 * Contract of `Scheduler` (broker/schedules/scheduler.ts), against LocalScheduler (one node,
 * `ha.schedules` off) and SharedScheduler (two nodes, on): each occurrence becomes one durable message from
 * the creator, even while the creator is offline, and is recorded in the schedule's row; what is created
 * or cancelled through a node is heard by the scheduler; and every schedule still fires exactly once while
 * the flag is flipped there and back twice (schedules created in every phase and pending across each flip).
 *
 * Driven through peers only (schedule.create / cancel / list and the messages that arrive). The shared
 * world runs the phase-3 preset, `ha.active-lease` included: with the flag off there, local schedules run
 * on the lease holder only, so "exactly once" is the cluster's promise in both states of the flag.
 */

import type { MeshClient } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import type { Frame, Message } from '../../protocol/frames.js';
import type { TestNode } from '../helpers/broker.js';
import type { TestMesh } from '../helpers/mesh.js';
import { waitFor } from '../helpers/wait.js';
import { flipSequence, useWorld, WORLDS } from './harness.js';

type Created = Frame & { scheduleId: string; nextFireAt: number };

const SEND_BURST = 40;

/** Messages a recipient gets, by scheduleId (after the SDK's dedup by messageId). */
function occurrences(client: MeshClient): Map<string, Message[]> {
  const bySchedule = new Map<string, Message[]>();
  client.on('message', (m: Message) => {
    if (!m.scheduleId) return;
    bySchedule.set(m.scheduleId, [...(bySchedule.get(m.scheduleId) ?? []), m]);
  });
  return bySchedule;
}

describe.each(WORLDS)('Scheduler contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.schedules',
    // Every occurrence takes from its creator's send limit: a burst above what one test fires per member
    // (the 30 due at once and a marker), within one 10 s burst window (40 per 10 s, 240 a minute).
    env: {
      SCHEDULE_POLL_MS: '100',
      SCHEDULE_MAX_PER_MEMBER: '1000',
      SEND_BURST: String(SEND_BURST),
      SEND_RATE_PER_MIN: '240',
    },
  });

  /**
   * Where a schedule is created now: through B while the shared scheduler runs (any node fires it),
   * else through the node that may run local background work (the only one that arms it).
   */
  async function creatorNode(): Promise<TestNode> {
    if (world.flagValue()) return world.b;
    const [active] = await world.activeNodes();
    if (!active) throw new Error('no node may run background work');
    return active;
  }

  /** The creating member's sessions on each node. */
  async function creators(mesh: TestMesh) {
    const onA = await world.peer(world.a, mesh, mesh.members[0]!);
    const onB = world.b === world.a ? onA : await world.peer(world.b, mesh, mesh.members[0]!);
    const now = async () => ((await creatorNode()) === world.a ? onA : onB);
    return { onA, onB, now };
  }

  const create = (client: MeshClient, to: string, body: string, inMs: number) =>
    client.request<Created>({ type: 'schedule.create', to, body, at: Date.now() + inMs });

  it('an occurrence becomes one durable message from the creator, even while the creator is offline, and is recorded in the schedule', async () => {
    const mesh = await world.mesh(2);
    const node = await creatorNode();
    const creator = await world.peer(node, mesh, mesh.members[0]!, { reconnect: false });
    const created = await create(creator, mesh.members[1]!.pubkey, 'ping', 400);
    expect(created).toMatchObject({ type: 'schedule.created' });
    expect(created.nextFireAt).toBeGreaterThan(Date.now());
    const listed = await creator.request<Frame & { schedules: Array<{ scheduleId: string }> }>({
      type: 'schedule.list',
    });
    expect(listed.schedules.map((s) => s.scheduleId)).toEqual([created.scheduleId]);
    const recipient = await world.peer(world.b, mesh, mesh.members[1]!);
    const got = occurrences(recipient);
    creator.close(); // the occurrence still comes from the creator
    await waitFor(() => got.has(created.scheduleId), { what: 'the occurrence' });
    expect(got.get(created.scheduleId)).toEqual([
      expect.objectContaining({
        type: 'message',
        body: 'ping',
        from: mesh.members[0]!.pubkey,
        fromSession: creator.sessionId,
        scheduleId: created.scheduleId,
        occurrence: 1,
      }),
    ]);
    // Recorded: the one-shot schedule is no longer active for its member.
    const later = await world.peer(node, mesh, mesh.members[0]!);
    await waitFor(
      async () => {
        const { schedules } = await later.request<Frame & { schedules: unknown[] }>({
          type: 'schedule.list',
        });
        return schedules.length === 0;
      },
      { what: 'the occurrence recorded' },
    );
    expect(Date.parse(got.get(created.scheduleId)![0]!.sentAt)).toBeGreaterThanOrEqual(
      created.nextFireAt - 5,
    );
    // A later schedule fires: by then a second copy of the first would have arrived too.
    const marker = await create(later, mesh.members[1]!.pubkey, 'marker', 300);
    await waitFor(() => got.has(marker.scheduleId));
    expect([...got.values()].map((list) => list.length)).toEqual([1, 1]);
  });

  it('many schedules due at the same instant, created through every node: each fires exactly once', async () => {
    const mesh = await world.mesh(2);
    const recipient = await world.peer(world.b, mesh, mesh.members[1]!);
    const got = occurrences(recipient);
    const creator = await creators(mesh);
    // Through both nodes where any node may fire; else through the one that arms local timers.
    const sessions = world.flagValue() ? [creator.onA, creator.onB] : [await creator.now()];
    // Sent at once (pipelined), with a lead that a loaded machine's 30 round trips still fit in: an `at` in
    // the past by the time a create is handled would be refused.
    const at = Date.now() + 2500;
    const created = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        sessions[i % sessions.length]!.request<Created>({
          type: 'schedule.create',
          to: mesh.members[1]!.pubkey,
          body: `due ${i}`,
          at,
        }),
      ),
    );
    const ids = created.map((c) => c.scheduleId);
    await waitFor(() => ids.every((id) => got.has(id)), { timeoutMs: 10_000, what: '30 occurrences' });
    const marker = await (await creator.now()).request<Created>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'marker',
      at: Date.now() + 300,
    });
    await waitFor(() => got.has(marker.scheduleId));
    expect(ids.filter((id) => got.get(id)?.length !== 1)).toEqual([]);
    expect(new Set(ids.map((id) => got.get(id)![0]!.body)).size).toBe(30);
  });

  it('a cancel made through any session of the creator, on any node, holds: the schedule never fires', async () => {
    const mesh = await world.mesh(2);
    const recipient = await world.peer(world.a, mesh, mesh.members[1]!);
    const got = occurrences(recipient);
    const node = await creatorNode();
    const creator = await world.peer(node, mesh, mesh.members[0]!);
    const elsewhere = await world.peer(node === world.a ? world.b : world.a, mesh, mesh.members[0]!);
    const doomed = await create(creator, mesh.members[1]!.pubkey, 'never', 500);
    // Without the shared scheduler a cancel must go through the node that armed the timer.
    const canceller = world.flagValue() ? elsewhere : creator;
    expect(await canceller.request({ type: 'schedule.cancel', scheduleId: doomed.scheduleId })).toMatchObject(
      {
        type: 'schedule.cancelled',
        scheduleId: doomed.scheduleId,
      },
    );
    await expect(
      recipient.request({ type: 'schedule.cancel', scheduleId: doomed.scheduleId }),
    ).rejects.toThrow('forbidden');
    const later = await create(creator, mesh.members[1]!.pubkey, 'later', 900);
    await waitFor(() => got.has(later.scheduleId), { what: 'the later schedule' });
    expect(got.has(doomed.scheduleId)).toBe(false);
  });

  it('each occurrence takes from the creator’s send limit, cluster-wide: of 50 due at once through every node, the burst is delivered and the rest skipped as rate_limited', async () => {
    const mesh = await world.mesh(2);
    const recipient = await world.peer(world.b, mesh, mesh.members[1]!);
    const got = occurrences(recipient);
    const creator = await creators(mesh);
    const sessions = world.flagValue() ? [creator.onA, creator.onB] : [await creator.now()];
    // Pipelined, with a lead that 50 round trips on a loaded machine fit in (a past `at` is refused).
    const at = Date.now() + 2500;
    const created = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        sessions[i % sessions.length]!.request<Created>({
          type: 'schedule.create',
          to: i % 2 === 0 ? mesh.members[1]!.pubkey : '*',
          body: `flood ${i}`,
          at,
        }),
      ),
    );
    const ids = created.map((c) => c.scheduleId);
    const decided = async () =>
      (
        await sessions[0]!.request<
          Frame & { entries: Array<{ eventType: string; payload: { reason?: string } }> }
        >({ type: 'audit.query', limit: 1000 })
      ).entries.filter((e) => e.eventType === 'schedule.fired' || e.eventType === 'schedule.skipped');
    await waitFor(async () => (await decided()).length === 50, { timeoutMs: 15_000, what: '50 decided' });
    // Every one-shot is decided (fired or skipped, audited) by now, so no other can arrive later: once
    // the burst's are in, the count below is final.
    await waitFor(() => ids.filter((id) => got.has(id)).length >= SEND_BURST, {
      what: 'the burst delivered',
    });
    // All fired within one burst window, from one bucket whichever node fired them.
    expect(ids.filter((id) => got.has(id)).length).toBe(SEND_BURST);
    const skipped = (await decided()).filter((e) => e.eventType === 'schedule.skipped');
    expect(skipped.map((e) => e.payload.reason)).toEqual(Array(50 - SEND_BURST).fill('rate_limited'));
    // A skipped one-shot is over, like a fired one. The local scheduler records an occurrence after it has
    // fired (and audited) it, so the list may show a one-shot for a moment after its audit entry.
    await waitFor(
      async () =>
        (await sessions[0]!.request<Frame & { schedules: unknown[] }>({ type: 'schedule.list' })).schedules
          .length === 0,
      { timeoutMs: 10_000, what: 'every one-shot over' },
    );
  });

  it('flips ha.schedules there and back twice: schedules created in every phase, and pending across each flip, fire exactly once', async () => {
    const mesh = await world.mesh(2);
    const recipientKeys = mesh.members[1]!;
    const recipient = await world.peer(world.b, mesh, recipientKeys);
    const got = occurrences(recipient);
    const { now: creatorOn } = await creators(mesh);
    const ids: string[] = [];
    for (const [i, target] of flipSequence(world).entries()) {
      // Due after the flip: armed (or polled for) by one implementation, fired by the other.
      const pending = await create(await creatorOn(), recipientKeys.pubkey, `pending across flip ${i}`, 1200);
      await world.flip(target);
      // Created and due within the new phase.
      const within = await create(await creatorOn(), recipientKeys.pubkey, `within phase ${i + 1}`, 300);
      ids.push(pending.scheduleId, within.scheduleId);
      await waitFor(() => got.has(pending.scheduleId) && got.has(within.scheduleId), {
        timeoutMs: 5000,
        what: `flip ${i}: the pending and the new schedule`,
      });
    }
    const marker = await create(await creatorOn(), recipientKeys.pubkey, 'marker', 300);
    await waitFor(() => got.has(marker.scheduleId));
    expect(ids.map((id) => [got.get(id)![0]!.body, got.get(id)!.length])).toEqual(
      ids.map((id) => [got.get(id)![0]!.body, 1]),
    );
    const listed = await (await creatorOn()).request<Frame & { schedules: unknown[] }>({
      type: 'schedule.list',
    });
    expect(listed.schedules).toEqual([]);
  }, 60_000);
});
