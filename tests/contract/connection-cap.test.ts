/**
 * Contract of `ConnectionCap` (broker/connection-cap/connection-cap.ts), against LocalConnectionCap (one node,
 * `ha.connection-cap` off) and SharedConnectionCap (two nodes, on): `admit` once per accepted hello, up to
 * the cap per mesh (4408 beyond it); a replacing connection of an admitted session is admitted again
 * without counting twice; `release` when the session's socket closes gives its place back; and the cap
 * keeps counting while the flag is flipped there and back twice.
 */
import { randomUUID } from 'node:crypto';
import type { MemberKeys } from '@mesh-broker/sdk';
import { afterEach, describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import { helloFrame } from '../helpers/hello.js';
import type { TestMesh } from '../helpers/mesh.js';
import { RawSocket } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';
import { flipSequence, useWorld, WORLDS_WITH_REDIS_CLUSTER } from './harness.js';

const CAP = 3;

interface Attempt {
  /** `welcome`, or the close code of a refused hello. */
  outcome: 'welcome' | number;
  socket: RawSocket;
  sessionId: string;
}

const open: RawSocket[] = [];

/** One hello of `member` (a new session unless `sessionId`) on `node`: welcomed, or closed with a code. */
async function hello(
  node: TestNode,
  mesh: TestMesh,
  member: MemberKeys,
  sessionId: string = randomUUID(),
): Promise<Attempt> {
  const socket = await RawSocket.open(node.wsUrl);
  open.push(socket);
  socket.send(helloFrame(mesh, member, { sessionId }));
  const outcome = await Promise.race([
    socket.next((f) => f.type === 'welcome').then(() => 'welcome' as const),
    socket.closed.then((closed) => closed.code),
  ]).catch(async () => (await socket.closed).code);
  return { outcome, socket, sessionId };
}

async function close(attempt: Attempt): Promise<void> {
  attempt.socket.close();
  await attempt.socket.closed;
}

describe.each(WORLDS_WITH_REDIS_CLUSTER)('ConnectionCap contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.connection-cap',
    // Parts of the shared cap live NODE_DEAD_MS after their last refresh. A Redis call may take a second
    // before the node counts locally (the documented fallback, tested in tests/cluster/ha-failures.test.ts):
    // with the default 250 ms, an event-loop stall on a loaded CI machine let B admit one over the cap.
    env: { MESH_CONNECTION_CAP: String(CAP), NODE_DEAD_MS: '5000', REDIS_TIMEOUT_MS: '1000' },
  });

  /** Waits until `node` holds this many sockets of the mesh (its gauge drops once it handled a close). */
  const sockets = (node: TestNode, mesh: TestMesh, count: number) =>
    waitFor(
      async () => (await world.metric(node, 'mesh_broker_connections', { mesh: mesh.meshId })) === count,
      {
        what: `${count} sockets of the mesh on ${node.nodeId}`,
      },
    );

  /** A place came back: a new hello on `node` is admitted (tried until it is). */
  const admittedSoon = (node: TestNode, mesh: TestMesh, member: MemberKeys) =>
    waitFor(
      async () => {
        const attempt = await hello(node, mesh, member);
        return attempt.outcome === 'welcome' ? attempt : undefined;
      },
      { timeoutMs: 5000, intervalMs: 50, what: 'a place in the mesh' },
    );

  afterEachClose();

  it('admits up to the cap per mesh, counting every node; one more is closed with 4408 on any node; other meshes are not affected', async () => {
    const mesh = await world.mesh(CAP + 1);
    const admitted = [
      await hello(world.a, mesh, mesh.members[0]!),
      await hello(world.b, mesh, mesh.members[1]!),
      await hello(world.a, mesh, mesh.members[2]!),
    ];
    expect(admitted.map((a) => a.outcome)).toEqual(['welcome', 'welcome', 'welcome']);
    for (const node of [world.a, world.b]) {
      expect((await hello(node, mesh, mesh.members[3]!)).outcome).toBe(4408);
    }
    const other = await world.mesh(CAP);
    for (const [i, node] of [world.b, world.a, world.b].entries()) {
      expect((await hello(node, other, other.members[i]!)).outcome).toBe('welcome');
    }
    expect(
      await world.metric(world.a, 'mesh_broker_hello_rejections_total', { reason: 'mesh at capacity' }),
    ).toBeGreaterThan(0);
  });

  it('a replacing connection of an admitted session is admitted again, on any node, without counting twice', async () => {
    const mesh = await world.mesh(CAP + 2);
    const first = await hello(world.a, mesh, mesh.members[0]!);
    const second = await hello(world.b, mesh, mesh.members[1]!);
    const third = await hello(world.a, mesh, mesh.members[2]!);
    expect([first, second, third].map((a) => a.outcome)).toEqual(['welcome', 'welcome', 'welcome']);
    // The mesh is full; the first session connects again on the other node while its old socket is open.
    const replacing = await hello(world.b, mesh, mesh.members[0]!, first.sessionId);
    expect(replacing.outcome).toBe('welcome');
    expect((await first.socket.closed).code).toBe(4409);
    // Still three sessions: a fourth is refused; one leaving makes room for exactly one.
    expect((await hello(world.a, mesh, mesh.members[3]!)).outcome).toBe(4408);
    await close(second);
    await admittedSoon(world.a, mesh, mesh.members[3]!);
    expect((await hello(world.b, mesh, mesh.members[4]!)).outcome).toBe(4408);
  });

  it("release when the session's socket closes gives its place back, to a hello on any node", async () => {
    const mesh = await world.mesh(CAP + 2);
    const held = [
      await hello(world.a, mesh, mesh.members[0]!),
      await hello(world.a, mesh, mesh.members[1]!),
      await hello(world.b, mesh, mesh.members[2]!),
    ];
    expect(held.map((a) => a.outcome)).toEqual(['welcome', 'welcome', 'welcome']);
    await close(held[0]!);
    await admittedSoon(world.b, mesh, mesh.members[3]!);
    expect((await hello(world.a, mesh, mesh.members[4]!)).outcome).toBe(4408);
    await close(held[2]!);
    await admittedSoon(world.a, mesh, mesh.members[4]!);
    expect((await hello(world.b, mesh, mesh.members[0]!)).outcome).toBe(4408);
  });

  it('flips ha.connection-cap there and back twice: the cap keeps counting, and places given back are free again', async () => {
    // `full` stays at the cap throughout (its sessions on A); `cycled` has sessions only while the flag
    // is on, and they leave while it is off, so a flip back finds its places free.
    const full = await world.mesh(CAP + 2);
    const cycled = await world.mesh(CAP);
    let holding = await Promise.all(full.members.slice(0, CAP).map((m) => hello(world.a, full, m)));
    expect(holding.map((a) => a.outcome)).toEqual(['welcome', 'welcome', 'welcome']);
    let cycledSessions: Attempt[] = [];
    const problems: string[] = [];
    const onPhase = async (label: string) => {
      // At the cap: one more is refused on A, and on B where the count is cluster-wide.
      for (const node of world.crossNode() ? [world.a, world.b] : [world.a]) {
        const extra = await hello(node, full, full.members[CAP]!);
        if (extra.outcome !== 4408)
          problems.push(`${label}: an extra session on ${node.nodeId} got ${extra.outcome}`);
      }
      // One leaves: exactly one place comes back.
      const [leaving, ...rest] = holding;
      await close(leaving!);
      const newcomer = await admittedSoon(world.a, full, full.members[CAP + 1]!).catch(() => undefined);
      if (!newcomer) problems.push(`${label}: a released place did not come back`);
      const again = await hello(world.a, full, full.members[CAP]!);
      if (again.outcome !== 4408) problems.push(`${label}: one place given back admitted two sessions`);
      holding = newcomer ? [...rest, newcomer] : rest;
      // The cycled mesh: its places must be free whenever it comes back.
      if (world.flagValue()) {
        cycledSessions = await Promise.all(cycled.members.map((m) => hello(world.a, cycled, m)));
        const outcomes = cycledSessions.map((a) => a.outcome);
        if (outcomes.some((o) => o !== 'welcome'))
          problems.push(`${label}: an empty mesh refused ${JSON.stringify(outcomes)}`);
      } else {
        for (const attempt of cycledSessions) await close(attempt);
        cycledSessions = [];
        await sockets(world.a, cycled, 0);
      }
    };
    await onPhase('before the flips');
    for (const [i, target] of flipSequence(world).entries()) {
      await world.flip(target);
      await onPhase(`after flip ${i} (${target ? 'on' : 'off'})`);
    }
    expect(problems).toEqual([]);
  }, 60_000);
});

function afterEachClose() {
  // Raw sockets are the test's own: closed after each test.
  afterEach(() => {
    for (const socket of open.splice(0)) socket.close();
  });
}
