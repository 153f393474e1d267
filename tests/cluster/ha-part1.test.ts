import { randomUUID } from 'node:crypto';
import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { HA_PART1_FLAGS, TestCluster } from '../helpers/cluster.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { RawSocket } from '../helpers/raw.js';
import { seriesValue } from '../helpers/verifier.js';
import { pause, waitFor } from '../helpers/wait.js';

const PART1 = HA_PART1_FLAGS;
const ALL_ON = Object.fromEntries(PART1.map((f) => [f, true]));
const ALL_OFF = Object.fromEntries(PART1.map((f) => [f, false]));

let db: TestDatabase;
let cluster: TestCluster;

beforeAll(async () => {
  db = await createTestDatabase('ha_part1');
  cluster = new TestCluster(db.url, {
    MESH_CONNECTION_CAP: '4',
    SEND_BURST: '1000',
    SEND_RATE_PER_MIN: '100000',
    MCP_CALL_TIMEOUT_MS: '1500',
    CLOCK_TICK_MS: '100',
  });
  cluster.setFlags('ha', []);
  await Promise.all([cluster.start('n1', 'ha'), cluster.start('n2', 'ha')]);
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  await db?.drop();
});

const ws = (id: string) => cluster.node(id).wsUrl;

/** One series of a node's GET /metrics (labels: a subset to match), or 0 when absent. */
async function metric(id: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${cluster.node(id).url}/metrics`)).text();
  return seriesValue(text, name, { ...labels, node: id }) ?? 0;
}

/** Resolves with the messages' bodies a client receives (after SDK dedup). */
function bodies(client: MeshClient): string[] {
  const seen: string[] = [];
  client.on('message', (m) => seen.push(m.body));
  return seen;
}

describe('HA part 1 with the flags off: the single-node gaps are real', () => {
  it('a DM to a peer on another node is not delivered until the peer is woken on its node', async () => {
    const mesh = await cluster.createMesh(3);
    const recipient = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const got = bodies(recipient);
    const far = await connectPeer(ws('n2'), mesh, mesh.members[1]!);
    const near = await connectPeer(ws('n1'), mesh, mesh.members[2]!);
    await far.send(mesh.members[0]!.pubkey, 'from n2');
    // Nothing tells n1 (no bus wake-up, no periodic check with ha.delivery off): a negative, so a wait.
    await pause(500, 'a window in which the DM must not arrive');
    expect(got).toEqual([]);
    // A message through n1 wakes the recipient's feed, which writes what the member is owed in seq order.
    await near.send(mesh.members[0]!.pubkey, 'from n1');
    await waitFor(() => got.includes('from n1'));
    expect(got).toEqual(['from n2', 'from n1']); // durable: the cross-node one was owed all along
  });

  it('subscribe on one node, publish on another: never delivered; lists and presence are per node', async () => {
    const mesh = await cluster.createMesh(2);
    const a = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('n2'), mesh, mesh.members[1]!);
    await a.request({ type: 'stream.subscribe', stream: 'ticks' });
    const data: unknown[] = [];
    a.on('frame', (f) => f.type === 'stream.data' && data.push(f.data));
    await b.request({ type: 'stream.publish', stream: 'ticks', data: 'lost' });
    await a.request({ type: 'stream.subscribe', stream: 'marker' });
    const a2 = await connectPeer(ws('n1'), mesh, mesh.members[1]!);
    await a2.request({ type: 'stream.publish', stream: 'ticks', data: 'local' });
    await waitFor(() => data.includes('local'));
    expect(data).toEqual(['local']);
    expect((await b.request({ type: 'stream.list' })).streams).toEqual([]);
    expect((await a.peers()).map((p) => p.node).sort()).toEqual(['n1', 'n1']);
  });
});

const tools = [{ name: 'add', description: 'adds', inputSchema: {} }];

describe('HA part 1 with the flags off: MCP and clock ticks', () => {
  it('clock ticks reach only the sessions of the node running the clock', async () => {
    const mesh = await cluster.createMesh(2);
    const a = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('n2'), mesh, mesh.members[1]!);
    const atB: unknown[] = [];
    b.on('frame', (f) => f.type === 'clock.tick' && atB.push(f.tick));
    await a.request({ type: 'clock.set', speed: 10 });
    await a.next('frame', (f) => f.type === 'clock.tick' && f.tick === 3);
    expect(atB).toEqual([]);
    await a.request({ type: 'clock.pause' });
  });

  it('a call on one node for a server hosted on another finds no server', async () => {
    const mesh = await cluster.createMesh(2);
    const host = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const caller = await connectPeer(ws('n2'), mesh, mesh.members[1]!);
    await host.request({ type: 'mcp.register', server: 'calc', tools });
    await expect(
      caller.request({ type: 'mcp.call', callId: 'c', server: 'calc', tool: 'add' }),
    ).rejects.toThrow('not_found');
  });
});

describe('HA part 1 with the flags on: the gaps are closed', () => {
  beforeAll(async () => {
    cluster.setFlags('ha', PART1);
    await Promise.all([cluster.waitActing('n1', ALL_ON), cluster.waitActing('n2', ALL_ON)]);
  });

  it('delivers DMs, broadcasts and group messages to sessions on any node', async () => {
    const mesh = await cluster.createMesh(3);
    const a = await connectPeer(ws('n1'), mesh, mesh.members[0]!, { groups: ['ops'] });
    const b = await connectPeer(ws('n2'), mesh, mesh.members[1]!, { groups: ['ops'] });
    const c = await connectPeer(ws('n2'), mesh, mesh.members[2]!);
    const [gotB, gotC] = [bodies(b), bodies(c)];
    await a.send(mesh.members[1]!.pubkey, 'dm');
    await a.send('*', 'everyone');
    await a.send('@ops', 'ops only');
    await waitFor(() => gotB.length === 3 && gotC.length === 1);
    expect(gotB).toEqual(['dm', 'everyone', 'ops only']);
    expect(gotC).toEqual(['everyone']);
    // n2 delivered what n1 accepted: from the bus hint (remote), or from Postgres when the hint came while the
    // session's first read was still running (backlog): which one is a race; the sum is not.
    const remote = await metric('n2', 'mesh_broker_deliveries_total', { path: 'remote' });
    const backlog = await metric('n2', 'mesh_broker_deliveries_total', { path: 'backlog' });
    expect(remote + backlog).toBeGreaterThanOrEqual(4);
    expect(
      await metric('n2', 'mesh_broker_fanout_latency_seconds_count', { kind: 'message' }),
    ).toBeGreaterThanOrEqual(3);
    expect(await metric('n2', 'mesh_broker_connections', { mesh: mesh.meshId })).toBe(2);
  });

  it('fans stream publishes out to every node, never twice to the publisher, with cluster-wide counts', async () => {
    const mesh = await cluster.createMesh(3);
    const a = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('n2'), mesh, mesh.members[1]!);
    const c = await connectPeer(ws('n1'), mesh, mesh.members[2]!);
    for (const peer of [a, b, c]) await peer.request({ type: 'stream.subscribe', stream: 'prices' });
    const seen = new Map<MeshClient, unknown[]>([
      [a, []],
      [b, []],
      [c, []],
    ]);
    for (const [peer, list] of seen) peer.on('frame', (f) => f.type === 'stream.data' && list.push(f.data));
    await a.request({ type: 'stream.publish', stream: 'prices', data: 1 });
    await b.request({ type: 'stream.publish', stream: 'prices', data: 2 });
    await waitFor(() => seen.get(a)!.length === 1 && seen.get(b)!.length === 1 && seen.get(c)!.length === 2);
    expect(seen.get(a)).toEqual([2]);
    expect(seen.get(b)).toEqual([1]);
    expect(seen.get(c)!.sort()).toEqual([1, 2]);
    expect((await c.request({ type: 'stream.list' })).streams).toEqual([{ name: 'prices', subscribers: 3 }]);
    // Each node delivered the other's publish: one stream fan-out observed on each.
    for (const id of ['n1', 'n2'])
      expect(
        await metric(id, 'mesh_broker_fanout_latency_seconds_count', { kind: 'stream' }),
      ).toBeGreaterThan(0);
  });

  it('lists presence cluster-wide and reattaches a session on another node without a false leave', async () => {
    const mesh = await cluster.createMesh(2);
    const observer = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const events: string[] = [];
    observer.on('peer.joined', (e) => events.push(`joined ${e.sessionId}`));
    observer.on('peer.left', (e) => events.push(`left ${e.sessionId}`));
    const sessionId = randomUUID();
    const onN2 = await rawSession(ws('n2'), helloFrame(mesh, mesh.members[1]!, { sessionId }));
    await waitFor(() => events.length === 1);
    expect((await observer.peers()).map((p) => [p.sessionId, p.node]).sort()).toEqual(
      [
        [observer.sessionId, 'n1'],
        [sessionId, 'n2'],
      ].sort(),
    );
    // The same session connects on n1 while still open on n2: n2's socket is replaced (4409).
    const onN1 = await RawSocket.open(ws('n1'));
    onN1.send(helloFrame(mesh, mesh.members[1]!, { sessionId }));
    expect(await onN1.next((f) => f.type === 'welcome')).toMatchObject({ resumed: true, node: 'n1' });
    expect(await metric('n1', 'mesh_broker_hellos_accepted_total', { resumed: 'true' })).toBeGreaterThan(0);
    expect((await onN2.closed).code).toBe(4409);
    // It leaves for real: one peer.left, after the grace period, from whichever node removes it.
    onN1.close();
    await waitFor(() => events.length === 2, { timeoutMs: 5000 });
    expect(events).toEqual([`joined ${sessionId}`, `left ${sessionId}`]);
  });

  it('refuses a replayed hello on another node, and a session of another member on any node', async () => {
    const mesh = await cluster.createMesh(2);
    const hello = helloFrame(mesh, mesh.members[0]!);
    const first = await rawSession(ws('n1'), hello);
    const replay = await RawSocket.open(ws('n2'));
    replay.send(hello);
    expect(await replay.closed).toEqual({ code: 4401, reason: 'nonce already used' });
    const thief = await RawSocket.open(ws('n2'));
    thief.send(helloFrame(mesh, mesh.members[1]!, { sessionId: hello.sessionId }));
    expect(await thief.closed).toEqual({ code: 4401, reason: 'session belongs to another member' });
    first.close();
  });

  it('routes MCP calls and results between the caller node and the host node', async () => {
    const mesh = await cluster.createMesh(3);
    const host = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const caller = await connectPeer(ws('n2'), mesh, mesh.members[1]!);
    const other = await connectPeer(ws('n2'), mesh, mesh.members[2]!);
    await host.request({ type: 'mcp.register', server: 'calc', description: 'maths', tools });
    expect((await caller.request({ type: 'mcp.list' })).servers).toEqual([
      { server: 'calc', description: 'maths', host: mesh.members[0]!.pubkey, tools, online: true },
    ]);
    host.on('frame', (f) => {
      if (f.type === 'mcp.invoke' && (f.args as { a?: number }).a !== undefined) {
        host.write({ type: 'mcp.result', callId: String(f.callId), result: (f.args as { a: number }).a + 1 });
      }
    });
    expect(
      await caller.request({ type: 'mcp.call', callId: 'c1', server: 'calc', tool: 'add', args: { a: 41 } }),
    ).toMatchObject({
      type: 'mcp.call_result',
      callId: 'c1',
      result: 42,
    });
    // Unanswered: the caller's node times out.
    const invoked = host.next('frame', (f) => f.type === 'mcp.invoke');
    expect(
      await caller.request({ type: 'mcp.call', callId: 'c2', server: 'calc', tool: 'add', args: {} }),
    ).toMatchObject({
      callId: 'c2',
      error: 'timeout',
    });
    // Only the host may answer, from any node.
    const { callId } = await invoked;
    await expect(other.request({ type: 'mcp.result', callId, result: 'forged' })).rejects.toThrow(
      /not_found|forbidden/,
    );
    // The host leaves mid-call: the caller on the other node hears at once.
    const pending = caller.request({ type: 'mcp.call', callId: 'c3', server: 'calc', tool: 'add', args: {} });
    await host.next('frame', (f) => f.type === 'mcp.invoke' && (f.args as { a?: number }).a === undefined);
    const closedAt = Date.now();
    host.close();
    expect((await pending).error).toMatch(/^host_left/);
    expect(Date.now() - closedAt).toBeLessThan(1000);
    expect((await caller.request({ type: 'mcp.list' })).servers).toMatchObject([
      { server: 'calc', online: false },
    ]);
  });

  it('sends clock ticks to the sessions of the mesh on every node', async () => {
    const mesh = await cluster.createMesh(2);
    const a = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('n2'), mesh, mesh.members[1]!);
    const ticks: Record<string, number[]> = { a: [], b: [] };
    a.on('frame', (f) => f.type === 'clock.tick' && ticks.a!.push(Number(f.tick)));
    b.on('frame', (f) => f.type === 'clock.tick' && ticks.b!.push(Number(f.tick)));
    await a.request({ type: 'clock.set', speed: 10 });
    await waitFor(() => ticks.a!.length >= 3 && ticks.b!.length >= 3);
    expect(ticks.b!.slice(0, 3)).toEqual(ticks.a!.slice(0, 3));
    // One node leads this clock (and reports it); the other only relays its ticks.
    const leader = String((await a.request({ type: 'clock.get' })).leader);
    expect(await metric(leader, 'mesh_broker_clocks_led')).toBeGreaterThanOrEqual(1);
    await a.request({ type: 'clock.pause' });
  });

  it('revokes a member on every node: its sockets on each node close with 4403 within 1 s', async () => {
    const mesh = await cluster.createMesh(2);
    // The member has a session on each node; the revocation is made through n1.
    const victims = await Promise.all(
      ['n1', 'n2'].map((id) => connectPeer(ws(id), mesh, mesh.members[0]!, { reconnect: false })),
    );
    const closedAt = victims.map((victim) =>
      victim.next('closed').then((event) => ({ event, at: Date.now() })),
    );
    const revokedAt = Date.now();
    const response = await fetch(
      `${cluster.node('n1').url}/admin/meshes/${mesh.meshId}/members/${mesh.members[0]!.pubkey}/revoke`,
      {
        method: 'POST',
        headers: { authorization: 'Bearer test-admin-token-0123456789' },
      },
    );
    expect(response.status).toBe(200);
    for (const closed of await Promise.all(closedAt)) {
      expect(closed.event).toMatchObject({ code: 4403 });
      expect(closed.at - revokedAt).toBeLessThan(1000);
    }
  });

  it('enforces the mesh cap over the cluster (4 sessions, spread over both nodes)', async () => {
    const mesh = await cluster.createMesh(5);
    for (let i = 0; i < 4; i++) await connectPeer(ws(i % 2 ? 'n2' : 'n1'), mesh, mesh.members[i]!);
    for (const node of ['n1', 'n2']) {
      const over = await RawSocket.open(ws(node));
      over.send(helloFrame(mesh, mesh.members[4]!));
      expect(await over.closed).toEqual({ code: 4408, reason: 'mesh at capacity' });
    }
  });
});

describe('mixed cluster and flips under traffic', () => {
  beforeAll(async () => {
    cluster.setFlags('legacy', []);
    await cluster.start('n3', 'legacy');
  });

  it('loses nothing between a node with the flags on and a node with them off', async () => {
    const mesh = await cluster.createMesh(2);
    const onShared = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const onLegacy = await connectPeer(ws('n3'), mesh, mesh.members[1]!);
    const [gotShared, gotLegacy] = [bodies(onShared), bodies(onLegacy)];
    // Shared → legacy: the legacy node still hands bus deliveries to its sockets.
    await onShared.send(mesh.members[1]!.pubkey, 'to legacy');
    // Legacy → shared: the legacy node delivers locally only; the shared node's sweep finds it.
    await onLegacy.send(mesh.members[0]!.pubkey, 'to shared');
    await waitFor(() => gotLegacy.includes('to legacy') && gotShared.includes('to shared'), {
      timeoutMs: 5000,
    });
  });

  it('flips the part-1 flags under traffic without losing or duplicating a durable message', async () => {
    const mesh = await cluster.createMesh(2);
    const sender = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const recipient = await connectPeer(ws('n2'), mesh, mesh.members[1]!);
    const got = bodies(recipient);
    let sent = 0;
    let sending = true;
    const traffic = (async () => {
      while (sending && sent < 2000) {
        await sender.send(mesh.members[1]!.pubkey, String(sent));
        sent++;
      }
    })();
    for (let flip = 0; flip < 4; flip++) {
      const on = flip % 2 === 1;
      cluster.setFlags('ha', on ? PART1 : []);
      await Promise.all(['n1', 'n2'].map((n) => cluster.waitActing(n, on ? ALL_ON : ALL_OFF)));
    }
    sending = false;
    await traffic;
    // Flags are on again (last flip): whatever waited while they were off is swept to the recipient.
    await waitFor(() => got.length >= sent, { timeoutMs: 10_000, what: `${sent} messages` });
    expect(new Set(got).size).toBe(got.length);
    expect(got.map(Number).sort((x, y) => x - y)).toEqual([...Array(sent).keys()]);
  });
});
