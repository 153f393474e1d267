/**
 * Contract of `Presence` (broker/presence/presence.ts), against LocalPresence (one node, `ha.presence`
 * off) and SharedPresence (two nodes, on): attach / reattach within the grace period, detach then one
 * `peer.left`, leave at once, claimNonce once (and only for members: refusing a non-member stores
 * nothing), bindSession (a session id stays its member's long after the grace period, across nodes and
 * flips), setStatus, close clearing only its node's sessions, and the flag flipped there and back twice
 * with sessions joining, leaving and inside their grace period.
 */
import { randomUUID } from 'node:crypto';
import type { MeshClient } from '@mesh-broker/sdk';
import { generateMemberKeys } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import type { PeerJoined, PeerLeft, PeerStatus } from '../../protocol/frames.js';
import type { TestNode } from '../helpers/broker.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import type { TestMesh } from '../helpers/mesh.js';
import { RawSocket } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';
import { flipSequence, nextFrame, useWorld, WORLDS, WORLDS_WITH_REDIS_CLUSTER } from './harness.js';

const GRACE_MS = 700;

/** Every presence event an observer hears, as "joined <session>" / "left <session>". */
function presenceLog(observer: MeshClient): string[] {
  const log: string[] = [];
  observer.on('peer.joined', (e: PeerJoined) => log.push(`joined ${e.sessionId}`));
  observer.on('peer.left', (e: PeerLeft) => log.push(`left ${e.sessionId}`));
  return log;
}

/** Resolves when `observer` hears `sessionId` leave; resolves false instead of throwing on timeout. */
function leaves(observer: MeshClient, sessionId: string, timeoutMs = GRACE_MS + 2500): Promise<boolean> {
  return observer
    .next('peer.left', (e: PeerLeft) => e.sessionId === sessionId, timeoutMs)
    .then(
      () => true,
      () => false,
    );
}

/** The close that refused a hello, or `{code: 0, reason: 'welcomed'}` when the node accepted it. */
async function helloRejection(node: TestNode, hello: object): Promise<{ code: number; reason: string }> {
  const socket = await RawSocket.open(node.wsUrl);
  socket.send(hello);
  const welcomed = socket
    .next((frame) => frame.type === 'welcome', 10_000)
    .then(
      () => ({ code: 0, reason: 'welcomed' }),
      () => new Promise<never>(() => {}), // closed first: the close is the answer
    );
  const outcome = await Promise.race([socket.closed, welcomed]);
  socket.close();
  return outcome;
}

describe.each(WORLDS_WITH_REDIS_CLUSTER)('Presence contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.presence',
    env: { PRESENCE_GRACE_MS: String(GRACE_MS), SEND_BURST: '1000', SEND_RATE_PER_MIN: '100000' },
  });

  /** How many sockets of the mesh node A holds (its gauge drops when it handled a close). */
  const connectionsOn = (node: TestNode, mesh: TestMesh) =>
    world.metric(node, 'mesh_broker_connections', { mesh: mesh.meshId });

  /** A session that joins and leaves: once its peer.left is heard, every earlier event has been too. */
  async function barrier(observer: MeshClient, mesh: TestMesh, member: number) {
    const sentinel = await world.peer(world.b, mesh, mesh.members[member]!);
    const left = leaves(observer, sentinel.sessionId);
    sentinel.close();
    expect(await left).toBe(true);
    return sentinel.sessionId;
  }

  it('attach announces one peer.joined; the session is listed with its node; after detach it stays listed for the grace period, then one peer.left', async () => {
    const mesh = await world.mesh(3);
    const observer = await world.peer(world.a, mesh, mesh.members[0]!, { name: 'observer' });
    const log = presenceLog(observer);
    const joined = observer.next('peer.joined');
    const joiner = await world.peer(world.b, mesh, mesh.members[1]!, { name: 'joiner', groups: ['ops'] });
    expect(await joined).toEqual({
      type: 'peer.joined',
      pubkey: mesh.members[1]!.pubkey,
      sessionId: joiner.sessionId,
      name: 'joiner',
    });
    const listed = await observer.peers();
    expect(listed.map((p) => [p.sessionId, p.node, p.name]).sort()).toEqual(
      [
        [observer.sessionId, world.a.nodeId, 'observer'],
        [joiner.sessionId, world.b.nodeId, 'joiner'],
      ].sort(),
    );
    expect(listed.find((p) => p.sessionId === joiner.sessionId)?.groups).toEqual(['ops']);

    const left = leaves(observer, joiner.sessionId);
    const closedAt = Date.now();
    joiner.close();
    // Disconnected, inside its grace period: still listed.
    await waitFor(async () => (await connectionsOn(world.b, mesh)) === (world.a === world.b ? 1 : 0));
    expect((await observer.peers()).map((p) => p.sessionId)).toContain(joiner.sessionId);
    expect(await left).toBe(true);
    expect(Date.now() - closedAt).toBeGreaterThanOrEqual(GRACE_MS - 100);
    expect((await observer.peers()).map((p) => p.sessionId)).toEqual([observer.sessionId]);
    const sentinel = await barrier(observer, mesh, 2);
    expect(log).toEqual([
      `joined ${joiner.sessionId}`,
      `left ${joiner.sessionId}`,
      `joined ${sentinel}`,
      `left ${sentinel}`,
    ]);
  });

  it('a session back within the grace period, on any node, is reattached (resumed, no peer.joined, no peer.left); a newer connection replaces the older one with 4409', async () => {
    const mesh = await world.mesh(3);
    const observer = await world.peer(world.a, mesh, mesh.members[0]!);
    const log = presenceLog(observer);
    const sessionId = randomUUID();
    const first = await RawSocket.open(world.a.wsUrl);
    first.send(helloFrame(mesh, mesh.members[1]!, { sessionId }));
    expect(await first.next((f) => f.type === 'welcome')).toMatchObject({ resumed: false });
    first.close();
    await first.closed;

    const second = await RawSocket.open(world.b.wsUrl);
    second.send(helloFrame(mesh, mesh.members[1]!, { sessionId }));
    expect(await second.next((f) => f.type === 'welcome')).toMatchObject({
      resumed: true,
      node: world.b.nodeId,
    });
    // While it is still connected on B, the session says hello on A: the newer connection wins.
    const third = await RawSocket.open(world.a.wsUrl);
    third.send(helloFrame(mesh, mesh.members[1]!, { sessionId }));
    expect(await third.next((f) => f.type === 'welcome')).toMatchObject({
      resumed: true,
      node: world.a.nodeId,
    });
    expect((await second.closed).code).toBe(4409);
    expect((await observer.peers()).find((p) => p.sessionId === sessionId)?.node).toBe(world.a.nodeId);

    const sentinel = await barrier(observer, mesh, 2);
    expect(log).toEqual([`joined ${sessionId}`, `joined ${sentinel}`, `left ${sentinel}`]);
    third.close();
  });

  it('leave ends a session at once (member revoked): one peer.left, well before the grace period', async () => {
    const mesh = await world.mesh(3);
    const observer = await world.peer(world.a, mesh, mesh.members[0]!);
    const log = presenceLog(observer);
    const victim = await world.peer(world.b, mesh, mesh.members[1]!, { reconnect: false });
    const closed = victim.next('closed');
    const left = leaves(observer, victim.sessionId);
    const revokedAt = Date.now();
    const response = await world.a.admin(
      `/admin/meshes/${mesh.meshId}/members/${mesh.members[1]!.pubkey}/revoke`,
      { method: 'POST' },
    );
    expect(response.status).toBe(200);
    expect(await closed).toMatchObject({ code: 4403 });
    expect(await left).toBe(true);
    expect(Date.now() - revokedAt).toBeLessThan(GRACE_MS - 200);
    expect((await observer.peers()).map((p) => p.sessionId)).toEqual([observer.sessionId]);
    const sentinel = await barrier(observer, mesh, 2);
    expect(log).toEqual([
      `joined ${victim.sessionId}`,
      `left ${victim.sessionId}`,
      `joined ${sentinel}`,
      `left ${sentinel}`,
    ]);
  });

  it('claimNonce: a hello is accepted once; its nonce is refused afterwards, on every node', async () => {
    const mesh = await world.mesh(1);
    const hello = helloFrame(mesh, mesh.members[0]!);
    const first = await rawSession(world.a.wsUrl, hello);
    for (const node of [world.b, world.a]) {
      expect(await helloRejection(node, hello)).toEqual({ code: 4401, reason: 'nonce already used' });
    }
    // A fresh hello of the same session (a new nonce) is fine, on either node.
    const again = await rawSession(
      world.b.wsUrl,
      helloFrame(mesh, mesh.members[0]!, { sessionId: hello.sessionId }),
    );
    expect((await first.closed).code).toBe(4409);
    again.close();
  });

  it("bindSession: after its grace period a session id stays its member's, on every node and across a flip there and back: another member's hello is refused (4401, the squatter's socket), the owner comes back untouched", async () => {
    const mesh = await world.mesh(3);
    const [, ownerKeys, squatterKeys] = mesh.members;
    const observer = await world.peer(world.a, mesh, mesh.members[0]!);
    const sessionId = randomUUID();
    const first = await rawSession(world.a.wsUrl, helloFrame(mesh, ownerKeys!, { sessionId }));
    const left = leaves(observer, sessionId);
    first.close();
    expect(await left).toBe(true); // the grace period is over: no presence row holds the id
    const refusal = { code: 4401, reason: 'session belongs to another member' };
    for (const node of [world.b, world.a]) {
      expect(await helloRejection(node, helloFrame(mesh, squatterKeys!, { sessionId }))).toEqual(refusal);
    }
    const owner = await world.peer(world.b, mesh, ownerKeys!, { sessionId });
    const refusedOwner: number[] = [];
    owner.on('disconnected', (event) => refusedOwner.push(event.code));
    // While the owner is connected, and once more after it left, through a flip there and back.
    expect(await helloRejection(world.a, helloFrame(mesh, squatterKeys!, { sessionId }))).toEqual(refusal);
    const gone = leaves(observer, sessionId);
    owner.close();
    expect(await gone).toBe(true);
    for (const target of [!world.home, world.home]) {
      await world.flip(target);
      expect(await helloRejection(world.b, helloFrame(mesh, squatterKeys!, { sessionId }))).toEqual(refusal);
    }
    const back = await world.peer(world.a, mesh, ownerKeys!, { sessionId });
    expect(back.connected).toBe(true);
    expect(refusedOwner).toEqual([]);
  }, 40_000);

  it("claimNonce only for members: hellos from outside the mesh (unknown key or mesh, revoked), each with a fresh nonce, are refused without storing one (no Redis key under the nodes' prefix), and their nonces stay free for a member", async () => {
    const mesh = await world.mesh(3);
    const revoked = mesh.members[2]!;
    const response = await world.a.admin(`/admin/meshes/${mesh.meshId}/members/${revoked.pubkey}/revoke`, {
      method: 'POST',
    });
    expect(response.status).toBe(200);
    {
      const nonceKeys = () => world.redisKeys('nonce:*');
      const before = await nonceKeys();
      const hellos = Array.from({ length: 30 }, (_, i) =>
        i % 3 === 0
          ? helloFrame(mesh, generateMemberKeys())
          : i % 3 === 1
            ? helloFrame({ ...mesh, meshId: randomUUID() }, mesh.members[0]!)
            : helloFrame(mesh, revoked),
      );
      const closes = await Promise.all(
        hellos.map((hello, i) => helloRejection(i % 2 === 0 ? world.a : world.b, hello)),
      );
      expect(closes.map((c) => c.code)).toEqual(hellos.map((_, i) => (i % 3 === 2 ? 4403 : 4401)));
      expect(await nonceKeys()).toEqual(before);
      // Nothing remembered in memory either: each of those nonces is accepted once from a member.
      for (const [i, hello] of hellos.slice(0, 6).entries()) {
        const node = i % 2 === 0 ? world.a : world.b;
        const reused = helloFrame(mesh, mesh.members[1]!, { nonce: hello.nonce });
        expect(await helloRejection(node, reused)).toEqual({ code: 0, reason: 'welcomed' });
      }
      // A member's accepted hello is what stores a nonce (in Redis with ha.presence).
      if (world.flagValue()) expect((await nonceKeys()).length).toBe(before.length + 6);
    }
  });

  it('setStatus: a status reported through any node reaches the mesh as peer.status and in peers.list; an unknown session is not_found', async () => {
    const mesh = await world.mesh(2);
    const observer = await world.peer(world.b, mesh, mesh.members[0]!);
    const subject = await world.peer(world.b, mesh, mesh.members[1]!);
    const status = nextFrame<PeerStatus>(observer, 'peer.status');
    // The hook is called on A; the session is on B.
    const response = await fetch(`${world.a.url}/hook/status`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sessionId: subject.sessionId, status: 'busy' }),
    });
    expect(response.status).toBe(200);
    expect(await status).toEqual({
      type: 'peer.status',
      pubkey: mesh.members[1]!.pubkey,
      sessionId: subject.sessionId,
      status: 'busy',
    });
    expect((await observer.peers()).find((p) => p.sessionId === subject.sessionId)?.status).toBe('busy');
    const unknown = await fetch(`${world.a.url}/hook/status`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sessionId: randomUUID(), status: 'busy' }),
    });
    expect(unknown.status).toBe(404);
  });

  it("close (node shutdown) clears only that node's sessions", async () => {
    const mesh = await world.mesh(3);
    const observer = await world.peer(world.a, mesh, mesh.members[0]!);
    const other = await world.peer(world.b, mesh, mesh.members[1]!);
    const log = presenceLog(observer);
    const extra = await world.startNode();
    const doomed = await world.peer(extra, mesh, mesh.members[2]!, { reconnect: false });
    await world.stopNode(extra);
    // The stopped node's session goes (at once on one node; after its grace period with shared rows).
    await waitFor(async () => !(await observer.peers()).some((p) => p.sessionId === doomed.sessionId), {
      timeoutMs: GRACE_MS + 5000,
      what: 'the stopped node’s session to go',
    });
    expect((await observer.peers()).map((p) => [p.sessionId, p.node]).sort()).toEqual(
      [
        [observer.sessionId, world.a.nodeId],
        [other.sessionId, world.b.nodeId],
      ].sort(),
    );
    expect(observer.connected && other.connected).toBe(true);
    const rows = await world.db.query<{ session_id: string; node_id: string }>(
      'SELECT session_id, node_id FROM presence WHERE mesh_id = $1',
      [mesh.meshId],
    );
    expect(rows.rows.map((r) => [r.session_id, r.node_id]).sort()).toEqual(
      [
        [observer.sessionId, world.a.nodeId],
        [other.sessionId, world.b.nodeId],
      ].sort(),
    );
    expect(
      log.filter(
        (e) => e.startsWith('left') && (e.includes(observer.sessionId) || e.includes(other.sessionId)),
      ),
    ).toEqual([]);
  });

  it('flips ha.presence there and back twice: joins, leaves, sessions inside their grace period, lists and nonces stay right', async () => {
    const mesh = await world.mesh(6);
    const [, steadyKeys, returningKeys, leavingKeys, joiningKeys, sentinelKeys] = mesh.members;
    const observer = await world.peer(world.a, mesh, mesh.members[0]!);
    const log = presenceLog(observer);
    const steady = await world.peer(world.b, mesh, steadyKeys!);
    await waitFor(() => log.includes(`joined ${steady.sessionId}`));

    const expected: string[] = [`joined ${steady.sessionId}`];
    const problems: string[] = [];
    for (const [i, target] of flipSequence(world).entries()) {
      // Two sessions inside their grace period as the flag flips: one comes back, one never does.
      const returning = await world.peer(world.a, mesh, returningKeys!, { reconnect: false });
      const leaving = await world.peer(world.a, mesh, leavingKeys!, { reconnect: false });
      expected.push(`joined ${returning.sessionId}`, `joined ${leaving.sessionId}`);
      await waitFor(() => log.includes(`joined ${leaving.sessionId}`));
      const left = leaves(observer, leaving.sessionId);
      returning.close();
      leaving.close();
      await waitFor(async () => (await connectionsOn(world.a, mesh)) === (world.a === world.b ? 2 : 1));

      await world.flip(target);

      const back = await world.peer(world.a, mesh, returningKeys!, { sessionId: returning.sessionId });
      if (!(await back.connect()).resumed) problems.push(`flip ${i}: the returning session was not resumed`);
      if (!(await left)) problems.push(`flip ${i}: no peer.left for a session whose grace ran out`);
      expected.push(`left ${leaving.sessionId}`);

      // A new session after the flip: one join, heard where the contract reaches.
      const joinAt = world.crossNode() ? world.b : world.a;
      const joining = await world.peer(joinAt, mesh, joiningKeys!);
      expected.push(`joined ${joining.sessionId}`);
      await waitFor(() => log.includes(`joined ${joining.sessionId}`), { what: `flip ${i}: a join` });
      const listed = (await observer.peers()).map((p) => p.sessionId).sort();
      const visible = [observer, back, joining, ...(world.crossNode() ? [steady] : [])];
      if (JSON.stringify(listed) !== JSON.stringify(visible.map((c) => c.sessionId).sort())) {
        problems.push(`flip ${i}: peers.list ${JSON.stringify(listed)}`);
      }
      // Nonces: a hello once, on any node the contract reaches.
      const hello = helloFrame(mesh, sentinelKeys!);
      const accepted = await rawSession(world.a.wsUrl, hello);
      const replayAt = world.crossNode() ? world.b : world.a;
      const replay = await helloRejection(replayAt, hello);
      if (replay.reason !== 'nonce already used')
        problems.push(`flip ${i}: replayed hello ${JSON.stringify(replay)}`);
      expected.push(`joined ${hello.sessionId}`);
      // Tidy up what stays connected: the returning and joining sessions leave for good, once each.
      const gone = [back, joining].map((c) => leaves(observer, c.sessionId));
      const helloGone = leaves(observer, hello.sessionId);
      back.close();
      joining.close();
      accepted.close();
      if (!(await helloGone) || !(await Promise.all(gone)).every(Boolean))
        problems.push(`flip ${i}: a session that closed did not leave`);
      expected.push(`left ${back.sessionId}`, `left ${joining.sessionId}`, `left ${hello.sessionId}`);
    }
    const sentinel = await barrier(observer, mesh, 5);
    expected.push(`joined ${sentinel}`, `left ${sentinel}`);
    expect(problems).toEqual([]);
    // Each session joined once and left at most once; nothing about the steady session after its join.
    expect([...log].sort()).toEqual([...expected].sort());
    expect((await observer.peers()).map((p) => p.sessionId).sort()).toEqual(
      [observer.sessionId, steady.sessionId].sort(),
    );
  }, 60_000);
});

describe.each(WORLDS)('Presence contract with a long grace period, %s', (kind) => {
  const LONG_GRACE_MS = 10_000;
  const world = useWorld(kind, { flag: 'ha.presence', env: { PRESENCE_GRACE_MS: String(LONG_GRACE_MS) } });

  it('leaveMember (member revoked): its sessions inside their grace period end at once, on every node: one peer.left each, no longer listed', async () => {
    const mesh = await world.mesh(2);
    const observer = await world.peer(world.a, mesh, mesh.members[0]!);
    const away = await world.peer(world.b, mesh, mesh.members[1]!, { reconnect: false });
    const left = leaves(observer, away.sessionId, 5000);
    away.close();
    const observersThere = world.a === world.b ? 1 : 0;
    await waitFor(
      async () =>
        (await world.metric(world.b, 'mesh_broker_connections', { mesh: mesh.meshId })) === observersThere,
    );
    expect((await observer.peers()).map((p) => p.sessionId)).toContain(away.sessionId);
    const revokedAt = Date.now();
    const response = await world.a.admin(
      `/admin/meshes/${mesh.meshId}/members/${mesh.members[1]!.pubkey}/revoke`,
      { method: 'POST' },
    );
    expect(response.status).toBe(200);
    expect(await left).toBe(true);
    expect(Date.now() - revokedAt).toBeLessThan(LONG_GRACE_MS / 2);
    expect((await observer.peers()).map((p) => p.sessionId)).toEqual([observer.sessionId]);
  });
});
