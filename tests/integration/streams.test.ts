import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame } from '../../protocol/frames.js';
import type { TestNode } from '../helpers/broker.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let node: TestNode;

beforeAll(async () => {
  db = await createTestDatabase('streams');
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      PRESENCE_GRACE_MS: '300',
      // Small history bounds (the local row keeps it in memory), for the bounds test.
      STREAM_HISTORY_TTL_MS: '1000',
      STREAM_HISTORY_BYTES: '4096',
      STREAM_HISTORY_NODE_BYTES: '12288',
    },
  });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

describe('streams on one node', () => {
  it('delivers a publish to every subscriber except the publishing session, and lists counts', async () => {
    const mesh = await createMesh(node, 3);
    const [a, b, c] = await Promise.all(mesh.members.map((m) => connectPeer(node.wsUrl, mesh, m)));
    expect(await b!.request({ type: 'stream.subscribe', stream: 'prices' })).toMatchObject({
      type: 'stream.subscribed',
      stream: 'prices',
    });
    await c!.request({ type: 'stream.subscribe', stream: 'prices' });
    await a!.request({ type: 'stream.subscribe', stream: 'prices' });
    const aFrames: Frame[] = [];
    a!.on('frame', (f) => {
      if (f.type === 'stream.data') aFrames.push(f);
    });
    const got = Promise.all([b!, c!].map((p) => p.next('frame', (f) => f.type === 'stream.data')));
    a!.write({ type: 'stream.publish', stream: 'prices', data: { eur: 1.08 } });
    for (const frame of await got) {
      expect(frame).toEqual({
        type: 'stream.data',
        stream: 'prices',
        data: { eur: 1.08 },
        from: mesh.members[0]!.pubkey,
        fromSession: a!.sessionId,
        offset: 1,
        epoch: expect.stringMatching(/^m[0-9a-f]+-\d+$/),
      });
    }
    const list = await b!.request({ type: 'stream.list' });
    expect(list).toMatchObject({ type: 'stream.list_result', streams: [{ name: 'prices', subscribers: 3 }] });
    // The publisher's own copy never comes: a publish from b reaches a, and a saw nothing before it.
    const fromB = a!.next('frame', (f) => f.type === 'stream.data');
    await b!.request({ type: 'stream.publish', stream: 'prices', data: 'from b' });
    expect((await fromB).data).toBe('from b');
    expect(aFrames.map((f) => f.data)).toEqual(['from b']);
  });

  it('stops delivering after unsubscribe', async () => {
    const mesh = await createMesh(node, 2);
    const [a, b] = await Promise.all(mesh.members.map((m) => connectPeer(node.wsUrl, mesh, m)));
    await b!.request({ type: 'stream.subscribe', stream: 's1' });
    await b!.request({ type: 'stream.subscribe', stream: 's2' });
    expect(await b!.request({ type: 'stream.unsubscribe', stream: 's1' })).toMatchObject({
      type: 'stream.unsubscribed',
    });
    const seen: unknown[] = [];
    b!.on('frame', (f) => {
      if (f.type === 'stream.data') seen.push(f.stream);
    });
    await a!.request({ type: 'stream.publish', stream: 's1', data: 1 });
    await a!.request({ type: 'stream.publish', stream: 's2', data: 2 });
    await waitFor(() => seen.length === 1);
    expect(seen).toEqual(['s2']);
  });

  it('keeps subscriptions across a quick reconnect and ends them when the session leaves', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const sessionId = randomUUID();
    const first = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[1]!, { sessionId }));
    first.send({ type: 'stream.subscribe', stream: 'news', rid: 's' });
    await first.next((f) => f.rid === 's');
    first.close();
    await first.closed;
    const second = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[1]!, { sessionId }));
    await a.request({ type: 'stream.publish', stream: 'news', data: 'still subscribed' });
    expect(await second.next((f) => f.type === 'stream.data')).toMatchObject({ data: 'still subscribed' });
    const left = a.next('peer.left', (e) => e.sessionId === sessionId);
    second.close();
    await left;
    const list = await a.request<Frame & { streams: unknown[] }>({ type: 'stream.list' });
    expect(list.streams).toEqual([]);
  });

  it.each([
    [{ type: 'stream.subscribe', stream: 'has space' }, 'field "stream"'],
    [{ type: 'stream.subscribe' }, 'missing field "stream"'],
    [{ type: 'stream.publish', stream: 'ok' }, 'missing field "data"'],
    [{ type: 'stream.publish', stream: 'x'.repeat(129), data: 1 }, 'field "stream"'],
  ])('refuses %j with bad_request', async (frame, message) => {
    const mesh = await createMesh(node, 1);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    await expect(a.request(frame)).rejects.toThrow(message);
  });

  it('the history keeps its bounds: no publish older than the age bound, at most the bytes of a stream, of the node', async () => {
    const mesh = await createMesh(node, 2);
    const publisher = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const resumer = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    type Subscribed = Frame & { epoch: string; offset: number; recovered?: boolean; reason?: string };
    const resume = (stream: string, since: { offset: number; epoch: string }) =>
      resumer.request<Subscribed>({ type: 'stream.subscribe', stream, since });
    const publish = (stream: string, data: unknown) =>
      publisher.request({ type: 'stream.publish', stream, data });
    // Age: 1 s.
    const aged = await publisher.request<Subscribed>({ type: 'stream.subscribe', stream: 'aged' });
    for (const value of [1, 2]) await publish('aged', value);
    expect(await resume('aged', { offset: 0, epoch: aged.epoch })).toMatchObject({ recovered: true });
    // Until the 1 s age bound passes, the resume is recovered; then the history no longer holds them.
    const trimmed = await waitFor(
      async () => {
        const reply = await resume('aged', { offset: 0, epoch: aged.epoch });
        return reply.recovered === false ? reply : undefined;
      },
      { timeoutMs: 10_000, what: 'the aged publishes trimmed' },
    );
    expect(trimmed).toMatchObject({ recovered: false, reason: 'history_trimmed' });
    expect(await resume('aged', { offset: 2, epoch: aged.epoch })).toMatchObject({ recovered: true });
    // Bytes of one stream: 4 KiB holds three of these (each about 1.2 KB as kept).
    const kilobyte = 'k'.repeat(1000);
    const heavy = await publisher.request<Subscribed>({ type: 'stream.subscribe', stream: 'heavy' });
    for (let i = 0; i < 6; i++) await publish('heavy', kilobyte);
    expect(await resume('heavy', { offset: 2, epoch: heavy.epoch })).toMatchObject({
      recovered: false,
      reason: 'history_trimmed',
    });
    expect(await resume('heavy', { offset: 3, epoch: heavy.epoch })).toMatchObject({ recovered: true });
    // Bytes of the node (12 KiB): three more streams as heavy push out the ones written longest ago.
    for (const stream of ['heavy2', 'heavy3', 'heavy4'])
      for (let i = 0; i < 6; i++) await publish(stream, kilobyte);
    const after = await resume('heavy', { offset: 3, epoch: heavy.epoch });
    expect(after.recovered).toBe(false);
    expect(['history_trimmed', 'epoch_changed']).toContain(after.reason);
  });
});
