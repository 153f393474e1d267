/**
 * The SDK's typed subscriptions against a real node (issue 28 item 2): `streams.subscribe`, `clock.onTick`,
 * `mcp.host` / `mcp.call`, and what survives a reconnect. The long cut (tests/helpers/sdk-proxy.ts refusing
 * for longer than the node's grace period) ends the session on the node, so its subscriptions and hosted
 * servers are gone there: only what the SDK sends again after the welcome comes back, as it must when a
 * peer lands on another node whose rows are local (phase 2).
 */
import { listMcpServers, listStreams, type MeshClient, MeshMcpError } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CuttableLink } from '../../cli/proxies/cuttable-link.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { pause, waitFor } from '../helpers/wait.js';

const GRACE_MS = 300;
let db: TestDatabase;
let node: TestNode;
let mesh: TestMesh;
const proxies: CuttableLink[] = [];

beforeAll(async () => {
  db = await createTestDatabase('sdk_features');
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: { PRESENCE_GRACE_MS: String(GRACE_MS), CLOCK_TICK_MS: '100' },
  });
  mesh = await createMesh(node, 3);
});
afterEach(async () => {
  closeAllClients();
  for (const proxy of proxies.splice(0)) await proxy.close();
});
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

/** Member `index` behind its own relay, so the test can cut it alone. */
async function behindProxy(index: number): Promise<{ peer: MeshClient; proxy: CuttableLink }> {
  const proxy = await CuttableLink.start(node.wsUrl);
  proxies.push(proxy);
  const peer = await connectPeer(proxy.wsUrl, mesh, mesh.members[index]!, {
    retry: { initialDelayMs: 20, maxDelayMs: 100 },
  });
  return { peer, proxy };
}

/** Cuts `peer` for longer than the grace period (its session ends on the node), then lets it back. */
async function longCut(peer: MeshClient, proxy: CuttableLink, witness: MeshClient): Promise<void> {
  const left = witness.next('peer.left', (event) => event.sessionId === peer.sessionId);
  proxy.refuse(true);
  proxy.cut();
  await left;
  proxy.refuse(false);
  await waitFor(() => peer.state === 'connected', { what: 'the reconnect after the long cut' });
}

describe('streams.subscribe', () => {
  it('delivers data, and is sent again after a reconnect that lost the session (a raw subscribe is not)', async () => {
    const publisher = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const { peer, proxy } = await behindProxy(1);
    const prices = peer.streams.subscribe('prices');
    await prices.ready;
    await peer.request({ type: 'stream.subscribe', stream: 'raw' });
    const got: unknown[] = [];
    prices.on('data', (frame) => got.push(frame.data));
    await publisher.streams.publish('prices', 1);
    await waitFor(() => got.length === 1, { what: 'the first data' });

    const resubscribed = prices.next('subscribed');
    await longCut(peer, proxy, publisher);
    await resubscribed;
    expect(await listStreams(publisher)).toEqual([{ name: 'prices', subscribers: 1 }]);
    await publisher.streams.publish('prices', 2);
    await waitFor(() => got.length === 2, { what: 'data after the reconnect' });
    expect(got).toEqual([1, 2]);
  });

  it('unsubscribe() stops the data and the node forgets the subscriber; recover: true works without positions', async () => {
    const publisher = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const subscriber = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const ticker = subscriber.streams.subscribe('ticker', { recover: true });
    const got: unknown[] = [];
    ticker.on('data', (frame) => got.push(frame.data));
    await ticker.ready;
    await publisher.streams.publish('ticker', 'a');
    await waitFor(() => got.length === 1, { what: 'the data' });
    // Subscribing again to the name gives the same subscription, not a second one.
    expect(subscriber.streams.subscribe('ticker')).toBe(ticker);
    await ticker.unsubscribe();
    expect((await listStreams(publisher)).find((stream) => stream.name === 'ticker')).toBeUndefined();
    await publisher.streams.publish('ticker', 'b');
    await pause(200, 'a window in which an unsubscribed stream must deliver nothing');
    expect(got).toEqual(['a']);
    expect(subscriber.streams.names()).toEqual([]);
  });
});

describe('streams unsubscribed while disconnected', () => {
  it('are unsubscribed at the next welcome, on a session the node resumed with them', async () => {
    const publisher = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const { peer, proxy } = await behindProxy(1);
    const quotes = peer.streams.subscribe('quotes');
    await quotes.ready;
    proxy.refuse(true);
    proxy.cut();
    await waitFor(() => peer.state !== 'connected', { what: 'the cut' });
    await quotes.unsubscribe(); // nothing to send it on: the node still holds it for the session
    const welcomed = peer.next('welcome');
    proxy.refuse(false);
    expect((await welcomed).resumed).toBe(true);
    await waitFor(async () => !(await listStreams(publisher)).some((stream) => stream.name === 'quotes'), {
      what: 'quotes gone from the node',
    });
  });
});

describe('clock.onTick', () => {
  it('calls the listener with each tick until its unsubscribe', async () => {
    const peer = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const ticks: number[] = [];
    const off = peer.clock.onTick((tick) => ticks.push(tick.tick));
    expect(await peer.clock.set(10)).toMatchObject({ type: 'clock.status', speed: 10 });
    await waitFor(() => ticks.length >= 2, { what: 'two ticks' });
    off();
    const seen = ticks.length;
    await pause(300, 'three tick intervals in which an unsubscribed listener must hear nothing');
    expect(ticks.length).toBe(seen);
    expect(ticks[1]! - ticks[0]!).toBe(1);
    await peer.clock.pause();
  });
});

describe('mcp.host and mcp.call', () => {
  it('hosts tools with a handler, maps errors and aborts, and registers again after a lost session', async () => {
    const caller = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const { peer: host, proxy } = await behindProxy(2);
    const hosted = await host.mcp.host(
      'calc',
      [{ name: 'add', description: 'a + b' }, { name: 'fail' }, { name: 'hang' }],
      (args, call) => {
        if (call.tool === 'fail') throw new Error('no such luck');
        if (call.tool === 'hang') return new Promise(() => {});
        const { a, b } = args as { a: number; b: number };
        return { sum: a + b, caller: call.caller };
      },
    );
    expect(await caller.mcp.call('calc', 'add', { a: 2, b: 3 })).toEqual({
      sum: 5,
      caller: mesh.members[0]!.pubkey,
    });
    const failed = await caller.mcp.call('calc', 'fail').catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(MeshMcpError);
    expect(failed).toMatchObject({ code: 'tool_error', error: 'no such luck' });
    await expect(caller.mcp.call('calc', 'nope')).rejects.toMatchObject({ code: 'not_found' });
    await expect(
      caller.mcp.call('calc', 'hang', {}, { signal: AbortSignal.timeout(150) }),
    ).rejects.toMatchObject({ code: 'aborted' });

    await longCut(host, proxy, caller);
    await waitFor(async () => (await listMcpServers(caller)).some((s) => s.server === 'calc' && s.online), {
      what: 'calc registered again',
    });
    expect(await caller.mcp.call('calc', 'add', { a: 1, b: 1 })).toMatchObject({ sum: 2 });
    await hosted.unregister();
    expect(host.mcp.servers()).toEqual([]);
    await expect(caller.mcp.call('calc', 'add', { a: 1, b: 1 })).rejects.toMatchObject({ code: 'not_found' });
  });

  it('list helpers and requests take an AbortSignal', async () => {
    const peer = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    await expect(listStreams(peer, { signal: AbortSignal.abort() })).rejects.toMatchObject({
      code: 'aborted',
    });
    await expect(listMcpServers(peer, { signal: AbortSignal.abort() })).rejects.toMatchObject({
      code: 'aborted',
    });
    await expect(peer.peers({ signal: AbortSignal.abort() })).rejects.toMatchObject({ code: 'aborted' });
    await expect(
      peer.send(mesh.members[1]!.pubkey, 'x', { signal: AbortSignal.abort() }),
    ).rejects.toMatchObject({ code: 'aborted' });
    expect((await peer.peers({ signal: new AbortController().signal })).length).toBeGreaterThan(0);
  });
});
