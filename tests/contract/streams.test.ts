/**
 * Contract of `Streams` (broker/streams/streams.ts), against LocalStreams (one node, `ha.streams` off) and
 * SharedStreams (two nodes, on): `publish` delivers `stream.data` once to every subscribed session of the
 * mesh except the publisher, with its offset and epoch (issue 28: positions, `since`, recovery and its
 * reasons, the history's size bound, bad `since`); `list` counts the mesh's subscribers; subscriptions
 * belong to the session (they survive a reconnect within the grace period, on any node, and end when the
 * session ends); and all of it while the flag is flipped there and back twice under a stream of publishes.
 * Issue 17: a session holds at most so many subscriptions, wherever it made them (one more is
 * `limit_exceeded` and changes nothing); `stream.list` answers pages with a cursor.
 */

import type { MeshClient } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import type { StreamData } from '../../protocol/frames.js';
import { waitFor } from '../helpers/wait.js';
import { collect, flipSequence, useWorld, WORLDS_WITH_REDIS_CLUSTER } from './harness.js';

const GRACE_MS = 600;
/** A small bound, so that a test reaches it with a few subscriptions. */
const MAX_SUBSCRIPTIONS = 5;
/** A small history, so that a test outgrows it with a few publishes. */
const HISTORY_SIZE = 5;

type Subscribed = {
  type: string;
  offset: number;
  epoch: string;
  recovered?: boolean;
  reason?: string;
};
type Placed = StreamData & { offset: number; epoch: string };

/** Every stream.data of `stream` a client receives, whole. */
function framesOf(client: MeshClient, stream: string): Placed[] {
  const seen: Placed[] = [];
  client.on('frame', (f) => {
    if (f.type === 'stream.data' && (f as unknown as StreamData).stream === stream)
      seen.push(f as unknown as Placed);
  });
  return seen;
}

type Listed = { streams: Array<{ name: string; subscribers: number }> };

/** The data of a stream a client receives. */
function dataOf(client: MeshClient, stream: string): unknown[] {
  const seen: unknown[] = [];
  client.on('frame', (f) => {
    if (f.type === 'stream.data' && (f as unknown as StreamData).stream === stream) seen.push(f.data);
  });
  return seen;
}

describe.each(WORLDS_WITH_REDIS_CLUSTER)('Streams contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.streams',
    env: {
      PRESENCE_GRACE_MS: String(GRACE_MS),
      STREAM_MAX_SUBSCRIPTIONS_PER_SESSION: String(MAX_SUBSCRIPTIONS),
      STREAM_HISTORY_SIZE: String(HISTORY_SIZE),
    },
  });

  const subscribe = (client: MeshClient, stream: string) =>
    client.request({ type: 'stream.subscribe', stream });
  const publish = (client: MeshClient, stream: string, data: unknown) =>
    client.request({ type: 'stream.publish', stream, data });
  const list = async (client: MeshClient) =>
    (await client.request<{ type: string } & Listed>({ type: 'stream.list' })).streams;

  /**
   * Everything published before now has reached `client` once this marker, published afterwards by
   * `from` on a stream `client` is subscribed to, arrives (a node hands one mesh's frames in order).
   */
  async function settled(client: MeshClient, from: MeshClient, stream: string) {
    const marker = `marker-${Math.random()}`;
    const arrived = client.next('frame', (f) => f.type === 'stream.data' && f.data === marker);
    await publish(from, stream, marker);
    await arrived;
  }

  it('a publish reaches every subscribed session of the mesh at most once, on any node, never the publisher; other streams and meshes get nothing', async () => {
    const mesh = await world.mesh(4);
    const publisher = await world.peer(world.a, mesh, mesh.members[0]!);
    const near = await world.peer(world.a, mesh, mesh.members[1]!);
    const far = await world.peer(world.b, mesh, mesh.members[2]!);
    const bystander = await world.peer(world.b, mesh, mesh.members[3]!);
    const otherMesh = await world.mesh(1);
    const stranger = await world.peer(world.b, otherMesh, otherMesh.members[0]!);
    for (const client of [publisher, near, far]) await subscribe(client, 'prices');
    await subscribe(bystander, 'other');
    await subscribe(stranger, 'prices');
    const [atPublisher, atNear, atFar] = [
      dataOf(publisher, 'prices'),
      dataOf(near, 'prices'),
      dataOf(far, 'prices'),
    ];
    const atBystander = collect(bystander, 'stream.data');
    const atStranger = collect(stranger, 'stream.data');
    for (const value of [1, { b: 2 }, 'three']) await publish(publisher, 'prices', value);
    await waitFor(() => atNear.length >= 3 && atFar.length >= 3, {
      what: 'three publishes at each subscriber',
    });
    expect(atNear).toEqual([1, { b: 2 }, 'three']);
    expect(atFar).toEqual([1, { b: 2 }, 'three']);
    const frame = await (async () => {
      const next = far.next('frame', (f) => f.type === 'stream.data');
      await publish(publisher, 'prices', 4);
      return next;
    })();
    expect(frame).toEqual({
      type: 'stream.data',
      stream: 'prices',
      data: 4,
      from: mesh.members[0]!.pubkey,
      fromSession: publisher.sessionId,
      offset: 4,
      epoch: expect.any(String),
    });
    // Markers through every receiver: nothing else was on its way.
    await settled(publisher, near, 'prices');
    await settled(bystander, near, 'other');
    const strangerPeer = await world.peer(world.a, otherMesh, otherMesh.members[0]!);
    await settled(stranger, strangerPeer, 'prices');
    expect(atPublisher).toHaveLength(1); // only the marker from `near`
    expect(atBystander.map((f) => (f as { stream: string }).stream)).toEqual(['other']);
    expect(atStranger).toHaveLength(1);
    expect(atNear).toEqual([1, { b: 2 }, 'three', 4]);
  });

  it('list counts the subscribers of the mesh on every node; unsubscribe takes one off', async () => {
    const mesh = await world.mesh(3);
    const a = await world.peer(world.a, mesh, mesh.members[0]!);
    const b = await world.peer(world.b, mesh, mesh.members[1]!);
    const c = await world.peer(world.b, mesh, mesh.members[2]!);
    for (const client of [a, b, c]) await subscribe(client, 'prices');
    await subscribe(b, 'alerts');
    const expected = [
      { name: 'alerts', subscribers: 1 },
      { name: 'prices', subscribers: 3 },
    ];
    expect(await list(a)).toEqual(expected);
    expect(await list(c)).toEqual(expected);
    await c.request({ type: 'stream.unsubscribe', stream: 'prices' });
    expect(await list(a)).toEqual([
      { name: 'alerts', subscribers: 1 },
      { name: 'prices', subscribers: 2 },
    ]);
    // Unsubscribed: it gets nothing more.
    const atC = dataOf(c, 'prices');
    await subscribe(c, 'marker');
    await publish(a, 'prices', 'after');
    await settled(c, a, 'marker');
    expect(atC).toEqual([]);
  });

  it('subscriptions belong to the session: they survive a reconnect within the grace period (on any node) and end with the session', async () => {
    const mesh = await world.mesh(2);
    const publisher = await world.peer(world.a, mesh, mesh.members[0]!);
    const first = await world.peer(world.a, mesh, mesh.members[1]!, { reconnect: false });
    await subscribe(first, 'prices');
    first.close();
    const back = await world.peer(world.b, mesh, mesh.members[1]!, { sessionId: first.sessionId });
    expect((await back.connect()).resumed).toBe(true);
    // The welcome comes before the node has loaded the session's subscriptions (and joined the mesh's
    // bus channel); the session's first reply comes after. A publish in between can be missed: a race
    // reported with this suite, kept out of this test so that it checks what it says, deterministically.
    await back.request({ type: 'ping' });
    const atBack = dataOf(back, 'prices');
    await publish(publisher, 'prices', 'still subscribed');
    await waitFor(() => atBack.length === 1);
    expect(atBack).toEqual(['still subscribed']);
    expect(await list(publisher)).toEqual([{ name: 'prices', subscribers: 1 }]);
    // The session ends (its grace period runs out): the subscription ends with it.
    const left = publisher.next('peer.left', (e) => e.sessionId === back.sessionId, GRACE_MS + 5000);
    back.close();
    await left;
    await waitFor(async () => (await list(publisher)).length === 0, { what: 'the subscription to end' });
  });

  // The flip test below once failed 1 run in 3 (stream.list one too many from the first flip to local on):
  // node B's presence reaper deleted a churning subscriber's row before node A's grace timer fired, so its
  // `peer.left` originated on B and A's registry kept the subscription, which A's next activation wrote
  // back. The test after it reproduces that deterministically.
  it('flips ha.streams there and back twice under publishes: at most once everywhere, nothing to the publisher, counts right after every flip', {
    timeout: 60_000,
  }, async () => {
    const mesh = await world.mesh(6);
    const [pubKeys, nearKeys, farKeys, churnKeys, leaverKeys] = mesh.members;
    const publisher = await world.peer(world.a, mesh, pubKeys!);
    const near = await world.peer(world.a, mesh, nearKeys!);
    const far = await world.peer(world.b, mesh, farKeys!);
    for (const client of [publisher, near, far]) await subscribe(client, 'ticks');
    const [atPublisher, atNear, atFar] = [
      dataOf(publisher, 'ticks'),
      dataOf(near, 'ticks'),
      dataOf(far, 'ticks'),
    ];
    let published = 0;
    let publishing = true;
    const traffic = (async () => {
      // One publish in flight at a time, each seen by the near subscriber (same node as the publisher)
      // before the next: the round trip is the pace, and a turn of the event loop between two publishes
      // lets the nodes' timers (the flips, the heartbeats) run between them.
      while (publishing && published < 100_000) {
        const value = published;
        const arrived = near.next('frame', (f) => f.type === 'stream.data' && f.data === value, 5000);
        await publish(publisher, 'ticks', value);
        await arrived;
        published++;
        await new Promise((resolve) => setImmediate(resolve));
      }
    })().catch((error) => {
      trafficError = error;
    });
    let trafficError: unknown;
    const problems: string[] = [];
    // Two more subscribers on A that come and go: subscribed while the flag is on, gone (one
    // unsubscribes, the other's session ends) while it is off, so every flip finds the other side's view.
    const churn = await world.peer(world.a, mesh, churnKeys!);
    let leaver: MeshClient | undefined;
    let churning = false;
    /** Subscribers of `ticks` as stream.list should count them: over the cluster, or node A's own. */
    const expected = () => (world.crossNode() ? 3 : 2) + (churning ? 2 : 0);
    const counted = async () => (await list(publisher)).find((s) => s.name === 'ticks')?.subscribers;
    const checkList = async (label: string) => {
      const ticks = await counted();
      if (ticks !== expected())
        problems.push(`${label}: stream.list counts ${ticks}, ${expected()} subscribed`);
    };
    const churnStep = async (label: string) => {
      if (world.flagValue() && !churning) {
        await subscribe(churn, 'ticks');
        leaver = await world.peer(world.a, mesh, leaverKeys!, { reconnect: false });
        await subscribe(leaver, 'ticks');
        churning = true;
      } else if (!world.flagValue() && churning) {
        await churn.request({ type: 'stream.unsubscribe', stream: 'ticks' });
        const left = publisher.next('peer.left', (e) => e.sessionId === leaver!.sessionId, GRACE_MS + 5000);
        leaver!.close();
        await left;
        churning = false;
      }
      // A session's end is cleaned up just after its peer.left: give the count a moment to follow.
      await waitFor(async () => (await counted()) === expected(), { timeoutMs: 2000 }).catch(() =>
        checkList(`${label}, after subscribers came or went`),
      );
    };
    await churnStep('before the flips');
    for (const [i, target] of flipSequence(world).entries()) {
      await world.flip(target);
      await checkList(`after flip ${i}`);
      await churnStep(`after flip ${i}`);
      // Publishes keep flowing after the flip (to B's subscriber where the contract reaches).
      const mark = published + 3;
      await waitFor(() => atNear.includes(mark), {
        what: `flip ${i}: publishes at the near subscriber (${published} published, ${atNear.length} received, last ${JSON.stringify(atNear.at(-1))}, ${String(trafficError)})`,
      });
      if (world.crossNode())
        await waitFor(() => atFar.includes(mark), { what: `flip ${i}: publishes at the far subscriber` });
    }
    await checkList('at the end');
    publishing = false;
    await traffic;
    await settled(far, near, 'ticks');
    await settled(near, far, 'ticks');
    expect(problems).toEqual([]);
    const numbers = (seen: unknown[]) => seen.filter((d): d is number => typeof d === 'number');
    for (const seen of [atNear, atFar]) {
      const got = numbers(seen);
      expect(new Set(got).size).toBe(got.length); // at most once
      expect([...got].sort((x, y) => x - y)).toEqual(got); // one publisher's order
    }
    expect(numbers(atNear)).toHaveLength(published); // same node as the publisher: every one
    expect(numbers(atPublisher)).toEqual([]);
  });
  it('a session that moves to the other node and ends there leaves nothing on the node it left: counted nowhere after a flip, not written back by the next', async () => {
    const mesh = await world.mesh(3);
    const watcher = await world.peer(world.a, mesh, mesh.members[0]!);
    const stayer = await world.peer(world.a, mesh, mesh.members[1]!);
    const mover = await world.peer(world.a, mesh, mesh.members[2]!, { reconnect: false });
    await subscribe(stayer, 'moves');
    await subscribe(mover, 'moves');
    // The session says hello on B (its socket on A is replaced), then its grace period runs out there: its
    // end is announced by B, where A's registry never hears of it unless the leave reaches A.
    const moved = await world.peer(world.b, mesh, mesh.members[2]!, {
      sessionId: mover.sessionId,
      reconnect: false,
    });
    await moved.request({ type: 'ping' });
    const left = watcher.next('peer.left', (e) => e.sessionId === mover.sessionId, GRACE_MS + 5000);
    moved.close();
    await left;
    const moves = async () => (await list(watcher)).find((s) => s.name === 'moves')?.subscribers;
    await waitFor(async () => (await moves()) === 1, {
      what: 'the moved session to be counted no more',
      timeoutMs: 2000,
    });
    for (const target of flipSequence(world).slice(0, 2)) {
      await world.flip(target);
      // Whatever each node holds now (its registry when local, the rows when shared): only the stayer.
      await waitFor(async () => (await moves()) === 1, { timeoutMs: 2000 }).catch(() => {});
      expect(await moves(), `subscribers of 'moves' after the flip to ${target ? 'shared' : 'local'}`).toBe(
        1,
      );
    }
  });

  it('a session holds at most the bound of subscriptions, also those it made on another node: one more is limit_exceeded and changes nothing', async () => {
    const mesh = await world.mesh(2);
    const first = await world.peer(world.a, mesh, mesh.members[0]!, { reconnect: false });
    const sameMember = await world.peer(world.b, mesh, mesh.members[0]!);
    const names = Array.from({ length: MAX_SUBSCRIPTIONS }, (_, i) => `s${i}`);
    for (const name of names) await subscribe(first, name);
    await expect(subscribe(first, 'one-more')).rejects.toThrow('limit_exceeded');
    // Subscribing again to one it has is no new subscription.
    expect(await subscribe(first, 's0')).toMatchObject({ type: 'stream.subscribed' });
    // The bound is the session's: the member's other session has its own.
    await subscribe(sameMember, 'one-more');
    expect(await list(sameMember)).toEqual([
      { name: 'one-more', subscribers: 1 },
      ...names.map((name) => ({ name, subscribers: 1 })),
    ]);
    // The session moves to the other node within its grace period: it brings its subscriptions, and they
    // still count there.
    first.close();
    const back = await world.peer(world.b, mesh, mesh.members[0]!, { sessionId: first.sessionId });
    await back.request({ type: 'ping' });
    if (world.crossNode()) await expect(subscribe(back, 'one-more')).rejects.toThrow('limit_exceeded');
    await back.request({ type: 'stream.unsubscribe', stream: 's4' });
    await subscribe(back, 'one-more');
    expect((await list(sameMember)).find((s) => s.name === 'one-more')?.subscribers).toBe(2);
  });

  it('stream.list answers pages in name order with a cursor: at most `limit` streams each, `next` until the last, every stream once', async () => {
    const mesh = await world.mesh(2);
    const a = await world.peer(world.a, mesh, mesh.members[0]!);
    const b = await world.peer(world.b, mesh, mesh.members[1]!);
    for (const name of ['delta', 'alpha', 'echo']) await subscribe(a, name);
    for (const name of ['charlie', 'bravo', 'alpha']) await subscribe(b, name);
    type Page = { type: string; next?: string } & Listed;
    const pages: Page[] = [];
    let cursor: string | undefined;
    do {
      pages.push(await a.request<Page>({ type: 'stream.list', limit: 2, ...(cursor ? { cursor } : {}) }));
      cursor = pages.at(-1)!.next;
    } while (cursor !== undefined && pages.length < 10);
    const all = [
      { name: 'alpha', subscribers: 2 },
      { name: 'bravo', subscribers: 1 },
      { name: 'charlie', subscribers: 1 },
      { name: 'delta', subscribers: 1 },
      { name: 'echo', subscribers: 1 },
    ];
    expect(pages.flatMap((p) => p.streams)).toEqual(all);
    expect(pages.map((p) => p.streams.length)).toEqual([2, 2, 1]);
    // The documented form, no cursor: the first page, here the whole list, without `next`.
    const whole = await a.request<Page>({ type: 'stream.list' });
    expect(whole.streams).toEqual(all);
    expect(whole.next).toBeUndefined();
    await expect(a.request({ type: 'stream.list', cursor: 'no spaces' })).rejects.toThrow('bad_request');
  });

  const subscribeAt = (client: MeshClient, stream: string, since?: unknown) =>
    client.request<Subscribed>({
      type: 'stream.subscribe',
      stream,
      ...(since === undefined ? {} : { since }),
    });

  it('positions: every publish of a stream gets the next offset from 1 in one epoch, the same on every node; stream.subscribed carries the top', async () => {
    const mesh = await world.mesh(3);
    const publisher = await world.peer(world.a, mesh, mesh.members[0]!);
    const near = await world.peer(world.a, mesh, mesh.members[1]!);
    const far = await world.peer(world.b, mesh, mesh.members[2]!);
    const first = await subscribeAt(near, 'pos');
    expect(first).toMatchObject({
      type: 'stream.subscribed',
      offset: 0,
      epoch: expect.stringMatching(/^[A-Za-z0-9-]{1,64}$/),
    });
    expect(await subscribeAt(far, 'pos')).toMatchObject({ offset: 0, epoch: first.epoch });
    await subscribeAt(far, 'other');
    const [atNear, atFar, atOther] = [framesOf(near, 'pos'), framesOf(far, 'pos'), framesOf(far, 'other')];
    for (const value of ['a', 'b', 'c']) await publish(publisher, 'pos', value);
    await publish(publisher, 'other', 'x');
    await waitFor(() => atNear.length === 3 && atFar.length === 3 && atOther.length === 1, {
      what: 'the publishes at both subscribers',
    });
    for (const seen of [atNear, atFar]) {
      expect(seen.map((f) => [f.data, f.offset, f.epoch])).toEqual([
        ['a', 1, first.epoch],
        ['b', 2, first.epoch],
        ['c', 3, first.epoch],
      ]);
    }
    // Each stream counts its own publishes.
    expect(atOther[0]!.offset).toBe(1);
    // A later subscriber is told the top it starts after.
    const late = await world.peer(world.b, mesh, mesh.members[0]!);
    expect(await subscribeAt(late, 'pos')).toMatchObject({ offset: 3, epoch: first.epoch });
  });

  it('since: a session resuming on the other node gets what it missed, in order, recovered: true, before newer live ones; at the top nothing is replayed', async () => {
    const mesh = await world.mesh(2);
    const publisher = await world.peer(world.a, mesh, mesh.members[0]!);
    const before = await world.peer(world.a, mesh, mesh.members[1]!);
    const { epoch } = await subscribeAt(before, 'resume');
    const seen = framesOf(before, 'resume');
    await publish(publisher, 'resume', 1);
    await waitFor(() => seen.length === 1, { what: 'the first publish' });
    before.close();
    for (const value of [2, 3, 4]) await publish(publisher, 'resume', value);
    // A new session of the member, on the other node, resumes after the last one it saw.
    const resumed = await world.peer(world.b, mesh, mesh.members[1]!);
    const got = framesOf(resumed, 'resume');
    const order: string[] = [];
    resumed.on('frame', (f) => order.push(f.type));
    const reply = await subscribeAt(resumed, 'resume', { offset: 1, epoch });
    expect(reply).toMatchObject({ type: 'stream.subscribed', offset: 4, epoch, recovered: true });
    expect(reply.reason).toBeUndefined();
    await publish(publisher, 'resume', 5);
    await waitFor(() => got.length === 4, { what: 'the missed publishes and the live one' });
    expect(got.map((f) => [f.data, f.offset])).toEqual([
      [2, 2],
      [3, 3],
      [4, 4],
      [5, 5],
    ]);
    expect(order.indexOf('stream.subscribed')).toBeLessThan(order.indexOf('stream.data'));
    // Already at the top: recovered, and nothing comes again.
    const again = await world.peer(world.a, mesh, mesh.members[1]!);
    const none = framesOf(again, 'resume');
    expect(await subscribeAt(again, 'resume', { offset: 5, epoch })).toMatchObject({
      offset: 5,
      recovered: true,
    });
    await subscribe(again, 'marker');
    await settled(again, publisher, 'marker');
    expect(none).toEqual([]);
  });

  it(`since: recovered false with the reason when the history no longer holds it (another epoch; older than its ${HISTORY_SIZE} publishes); the newest ${HISTORY_SIZE} are kept`, async () => {
    const mesh = await world.mesh(2);
    const publisher = await world.peer(world.a, mesh, mesh.members[0]!);
    const probe = await world.peer(world.b, mesh, mesh.members[1]!);
    const { epoch } = await subscribeAt(probe, 'bounded');
    for (let i = 1; i <= 2 * HISTORY_SIZE; i++) await publish(publisher, 'bounded', i);
    const later = await world.peer(world.b, mesh, mesh.members[1]!);
    const replayed = framesOf(later, 'bounded');
    expect(await subscribeAt(later, 'bounded', { offset: 0, epoch: 'not-this-epoch' })).toMatchObject({
      offset: 2 * HISTORY_SIZE,
      epoch,
      recovered: false,
      reason: 'epoch_changed',
    });
    expect(await subscribeAt(later, 'bounded', { offset: HISTORY_SIZE - 1, epoch })).toMatchObject({
      recovered: false,
      reason: 'history_trimmed',
    });
    // Just inside the bound: the newest HISTORY_SIZE publishes, all of them.
    expect(await subscribeAt(later, 'bounded', { offset: HISTORY_SIZE, epoch })).toMatchObject({
      recovered: true,
    });
    await waitFor(() => replayed.length === HISTORY_SIZE, { what: 'the kept publishes' });
    expect(replayed.map((f) => f.offset)).toEqual(
      Array.from({ length: HISTORY_SIZE }, (_, i) => HISTORY_SIZE + 1 + i),
    );
  });

  it.each([
    [{ offset: -1, epoch: 'e1' }, 'field "since.offset"'],
    [{ offset: 1.5, epoch: 'e1' }, 'field "since.offset"'],
    [{ offset: '3', epoch: 'e1' }, 'field "since.offset"'],
    [{ offset: 1 }, 'field "since.epoch"'],
    [{ offset: 1, epoch: '' }, 'field "since.epoch"'],
    [{ offset: 1, epoch: 'has space' }, 'field "since.epoch"'],
    [{ offset: 1, epoch: 'x'.repeat(65) }, 'field "since.epoch"'],
    [{ offset: 1, epoch: 'e1', extra: true }, 'since'],
    ['3', 'field "since"'],
  ])('refuses since %j with bad_request and subscribes nothing', async (since, message) => {
    const mesh = await world.mesh(1);
    const a = await world.peer(world.a, mesh, mesh.members[0]!);
    await expect(subscribeAt(a, 'badsince', since)).rejects.toThrow(message);
    expect(await list(a)).toEqual([]);
  });

  it('refuses a since ahead of the stream in its own epoch with bad_request, and subscribes nothing', async () => {
    const mesh = await world.mesh(2);
    const a = await world.peer(world.a, mesh, mesh.members[0]!);
    const b = await world.peer(world.b, mesh, mesh.members[1]!);
    const { epoch } = await subscribeAt(b, 'ahead');
    await publish(a, 'ahead', 1);
    await expect(subscribeAt(a, 'ahead', { offset: 2, epoch })).rejects.toThrow('ahead of the stream');
    expect(await list(a)).toEqual([{ name: 'ahead', subscribers: 1 }]);
  });
});
