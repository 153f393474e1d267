/**
 * A peer that lands on another node keeps what it holds (issue 28: "in phase 2 streams, clocks and MCP are
 * still local rows, so every reconnect of a Node peer lands where its subscriptions are not, and the SDK
 * does not resubscribe either"). Two nodes of one cluster with `ha.streams` and `ha.mcp` off (their
 * defaults: each node holds its own subscriptions and servers); the peer reaches node 0 through a relay
 * that the test cuts, so its next attempt goes to node 1. A raw `stream.subscribe` (what the SDK had
 * before) stays behind on node 0; what the SDK holds through `streams.subscribe` and `mcp.host` follows it.
 */
import { listMcpServers, type MeshClient } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CuttableLink } from '../../cli/proxies/cuttable-link.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNodes } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { pause, waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let nodes: TestNode[];
let mesh: TestMesh;
const proxies: CuttableLink[] = [];

beforeAll(async () => {
  db = await createTestDatabase('sdk_failover');
  nodes = await startNodes({ kind: 'in-process', databaseUrl: db.url, count: 2 });
  mesh = await createMesh(nodes[0]!, 3);
});
afterEach(async () => {
  closeAllClients();
  for (const proxy of proxies.splice(0)) await proxy.close();
});
afterAll(async () => {
  for (const node of nodes ?? []) await node.stop();
  await db?.drop();
});

/** Member `index` on node 0 through a relay, with node 1 as its next URL. */
async function onNodeZero(index: number): Promise<{ peer: MeshClient; proxy: CuttableLink }> {
  const proxy = await CuttableLink.start(nodes[0]!.wsUrl);
  proxies.push(proxy);
  const peer = await connectPeer([proxy.wsUrl, nodes[1]!.wsUrl], mesh, mesh.members[index]!, {
    retry: { initialDelayMs: 20, maxDelayMs: 100 },
  });
  expect(peer.node).toBe(nodes[0]!.nodeId);
  return { peer, proxy };
}

/** Cuts node 0 away from `peer` for good; resolves once it is welcomed by node 1. */
async function moveToNodeOne(peer: MeshClient, proxy: CuttableLink): Promise<void> {
  proxy.refuse(true);
  proxy.cut();
  await waitFor(() => peer.state === 'connected' && peer.node === nodes[1]!.nodeId, {
    what: 'the peer welcomed by node 1',
  });
}

describe('a peer moved to another node (local rows)', () => {
  it('keeps its streams.subscribe subscriptions there; a raw subscribe stays behind', async () => {
    const { peer, proxy } = await onNodeZero(1);
    const publisher = await connectPeer(nodes[1]!.wsUrl, mesh, mesh.members[0]!);
    const typed: unknown[] = [];
    const raw: unknown[] = [];
    const feed = peer.streams.subscribe('typed');
    feed.on('data', (frame) => typed.push(frame.data));
    await feed.ready;
    await peer.request({ type: 'stream.subscribe', stream: 'raw' });
    peer.on('frame', (frame) => {
      if (frame.type === 'stream.data' && frame.stream === 'raw') raw.push(frame.data);
    });
    const resubscribed = feed.next('subscribed');
    await moveToNodeOne(peer, proxy);
    await resubscribed;
    await publisher.streams.publish('typed', 1);
    await publisher.streams.publish('raw', 1);
    await waitFor(() => typed.length === 1, { what: 'the typed subscription to get data on node 1' });
    await pause(200, 'a window in which the raw subscription, left on node 0, must get nothing');
    expect(typed).toEqual([1]);
    expect(raw).toEqual([]);
  });

  it('keeps hosting its MCP server there: a caller on node 1 reaches it', async () => {
    const { peer: host, proxy } = await onNodeZero(2);
    const caller = await connectPeer(nodes[1]!.wsUrl, mesh, mesh.members[0]!);
    await host.mcp.host('echo', [{ name: 'say' }], (args) => args);
    await moveToNodeOne(host, proxy);
    await waitFor(async () => (await listMcpServers(caller)).some((s) => s.server === 'echo' && s.online), {
      what: 'echo listed on node 1',
    });
    expect(await caller.mcp.call('echo', 'say', { hi: 1 })).toEqual({ hi: 1 });
  });
});
