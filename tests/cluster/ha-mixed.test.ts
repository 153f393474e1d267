import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame } from '../../protocol/frames.js';
import { HA_PART1_FLAGS, TestCluster } from '../helpers/cluster.js';
import { helloFrame } from '../helpers/hello.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { RawSocket } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';

/**
 * One cluster, two nodes: "shared" runs every HA-part-1 row's shared implementation, "legacy" the local
 * ones: what a cluster looks like halfway through a flip. Each test states what happens per row.
 */
const PART1 = HA_PART1_FLAGS;

let db: TestDatabase;
let cluster: TestCluster;

beforeAll(async () => {
  db = await createTestDatabase('ha_mixed');
  cluster = new TestCluster(db.url, { CLOCK_TICK_MS: '100', MESH_CONNECTION_CAP: '2' });
  cluster.setFlags('on', PART1);
  cluster.setFlags('off', []);
  await Promise.all([cluster.start('shared', 'on'), cluster.start('legacy', 'off')]);
  await cluster.waitActing('shared', Object.fromEntries(PART1.map((f) => [f, true])));
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  await db?.drop();
});

const ws = (id: string) => cluster.node(id).wsUrl;

describe('a mixed cluster (one node shared, one local)', () => {
  it('presence: the shared node lists every session; the local node only its own', async () => {
    const mesh = await cluster.createMesh(2);
    const a = await connectPeer(ws('shared'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('legacy'), mesh, mesh.members[1]!);
    expect((await a.peers()).map((p) => p.node).sort()).toEqual(['legacy', 'shared']);
    expect((await b.peers()).map((p) => p.node)).toEqual(['legacy']);
  });

  it('streams: what the shared node publishes reaches the local node; not the other way', async () => {
    const mesh = await cluster.createMesh(2);
    const a = await connectPeer(ws('shared'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('legacy'), mesh, mesh.members[1]!);
    for (const peer of [a, b]) await peer.request({ type: 'stream.subscribe', stream: 's' });
    const atB = b.next('frame', (f) => f.type === 'stream.data');
    await a.request({ type: 'stream.publish', stream: 's', data: 'from shared' });
    expect((await atB).data).toBe('from shared');
    const atA: unknown[] = [];
    a.on('frame', (f) => f.type === 'stream.data' && atA.push(f.data));
    await b.request({ type: 'stream.publish', stream: 's', data: 'from legacy' });
    await a.request({ type: 'stream.publish', stream: 'marker', data: 0 });
    const c = await connectPeer(ws('shared'), mesh, mesh.members[1]!);
    await c.request({ type: 'stream.subscribe', stream: 's' });
    await c.request({ type: 'stream.publish', stream: 's', data: 'marker' });
    await waitFor(() => atA.includes('marker'));
    expect(atA).toEqual(['marker']);
  });

  it('mcp: each side sees only its own registry', async () => {
    const mesh = await cluster.createMesh(2);
    const onShared = await connectPeer(ws('shared'), mesh, mesh.members[0]!);
    const onLegacy = await connectPeer(ws('legacy'), mesh, mesh.members[1]!);
    await onShared.request({ type: 'mcp.register', server: 'a', tools: [] });
    await onLegacy.request({ type: 'mcp.register', server: 'b', tools: [] });
    expect(
      (
        await onShared.request<Frame & { servers: Array<{ server: string }> }>({ type: 'mcp.list' })
      ).servers.map((s) => s.server),
    ).toEqual(['a']);
    expect(
      (
        await onLegacy.request<Frame & { servers: Array<{ server: string }> }>({ type: 'mcp.list' })
      ).servers.map((s) => s.server),
    ).toEqual(['b']);
  });

  it('clock: ticks of a clock run by the shared node reach sessions on the local node', async () => {
    const mesh = await cluster.createMesh(2);
    const a = await connectPeer(ws('shared'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('legacy'), mesh, mesh.members[1]!);
    const tickAtB = b.next('frame', (f) => f.type === 'clock.tick', 5000);
    await a.request({ type: 'clock.set', speed: 10 });
    expect(await tickAtB).toMatchObject({ type: 'clock.tick', speed: 10 });
  });

  it('durable delivery: nothing is lost in either direction (bus hand-off one way, sweep the other)', async () => {
    const mesh = await cluster.createMesh(2);
    const a = await connectPeer(ws('shared'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('legacy'), mesh, mesh.members[1]!);
    const [atA, atB] = [a.next('message'), b.next('message')];
    await a.send(mesh.members[1]!.pubkey, 'to legacy');
    await b.send(mesh.members[0]!.pubkey, 'to shared');
    expect((await atB).body).toBe('to legacy');
    expect((await atA).body).toBe('to shared');
  });

  it('cap and rate limits: a local node counts only its own, on top of the shared count', async () => {
    const mesh = await cluster.createMesh(3);
    await connectPeer(ws('shared'), mesh, mesh.members[0]!);
    const onShared = await connectPeer(ws('shared'), mesh, mesh.members[1]!);
    const over = await RawSocket.open(ws('shared'));
    over.send(helloFrame(mesh, mesh.members[2]!));
    expect((await over.closed).code).toBe(4408);
    // The local node does not see the shared count: it admits up to its own cap.
    await connectPeer(ws('legacy'), mesh, mesh.members[2]!);
    const onLegacy = await connectPeer(ws('legacy'), mesh, mesh.members[1]!);
    // The member's quota (burst 10) is taken once on the shared node, and again on the local one.
    const sendMany = async (peer: MeshClient) => {
      const results = await Promise.allSettled(Array.from({ length: 12 }, () => peer.send('*', 'x')));
      return results.filter((r) => r.status === 'fulfilled').length;
    };
    expect(await sendMany(onShared)).toBe(10);
    expect(await sendMany(onLegacy)).toBe(10);
  });
});
