/**
 * The bus authenticates and validates (issue 25, item 1): a plain Redis client that can PUBLISH on the
 * cluster's bus channels, but holds no BUS_SECRET, can put no frame on a socket, close no socket and lose no
 * message. Two in-process nodes with the bus-using rows shared; a peer on each; the forger publishes on
 * the channels the nodes listen to (`<prefix>bus:mesh:<meshId>`, `<prefix>bus:node:<nodeId>`).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { seal } from '../../broker/bus/envelope.js';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import { TEST_BUS_SECRET } from '../helpers/bus-secret.js';
import { HA_PART1_FLAGS } from '../helpers/cluster.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { closeAllClients, createMesh, type TestMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import type { RawSocket } from '../helpers/raw.js';
import { waitFor, within } from '../helpers/wait.js';

let db: TestDatabase;
let dir: string;
let forger: Redis;
let a: InProcessNode;
let b: InProcessNode;
const prefix = `wbtest:${randomBytes(4).toString('hex')}:`;
const FLAGS_ENV = 'bustrust';
const NEW_SECRET = `new-bus-secret-${randomBytes(16).toString('hex')}`;
const WRONG_SECRET = `wrong-bus-secret-${randomBytes(16).toString('hex')}`;
let nodeEnv: Record<string, string>;

beforeAll(async () => {
  db = await createTestDatabase('bus_trust');
  dir = mkdtempSync(join(tmpdir(), 'wb-bus-trust-'));
  const values = defaultFlagValues();
  for (const key of HA_PART1_FLAGS) values[key] = true;
  writeFileSync(join(dir, `${FLAGS_ENV}.json`), renderFlagsDocument(values));
  const env = { FLAGS_DIR: dir, FLAGS_ENV, REDIS_KEY_PREFIX: prefix, SEND_BURST: '1000' };
  nodeEnv = env;
  a = await startNode({ kind: 'in-process', databaseUrl: db.url, env: { ...env, NODE_ID: 'trust-a' } });
  b = await startNode({ kind: 'in-process', databaseUrl: db.url, env: { ...env, NODE_ID: 'trust-b' } });
  for (const node of [a, b]) await node.waitForSwitch('ha.delivery', 'shared');
  forger = new Redis('redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 });
});
afterEach(closeAllClients);
afterAll(async () => {
  forger?.disconnect();
  await a?.stop();
  await b?.stop();
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

const meshChannel = (meshId: string) => `${prefix}bus:mesh:${meshId}`;
const nodeChannel = (nodeId: string) => `${prefix}bus:node:${nodeId}`;

/** A peer on each node: `alice` on a, `bob` on b, bob's session id known (a kick names it). */
async function twoPeers(): Promise<{ mesh: TestMesh; alice: RawSocket; bob: RawSocket; bobSession: string }> {
  const mesh = await createMesh(a, 2);
  const bobSession = randomUUID();
  const alice = await rawSession(a.wsUrl, helloFrame(mesh, mesh.members[0]!));
  const bob = await rawSession(b.wsUrl, helloFrame(mesh, mesh.members[1]!, { sessionId: bobSession }));
  // alice hears bob's join over the bus: both nodes hold the mesh's channel from here on.
  await alice.next((frame) => frame.type === 'peer.joined' && frame.sessionId === bobSession);
  return { mesh, alice, bob, bobSession };
}

/** A forged `message` frame, as a member would see one from `from` (a messageId of the broker's form). */
function forgedMessage(mesh: TestMesh, id: string) {
  return {
    type: 'message',
    messageId: `${id}-00000000000000ff`,
    sentAt: new Date().toISOString(),
    from: mesh.members[0]!.pubkey,
    fromSession: randomUUID(),
    to: mesh.members[1]!.pubkey,
    body: `forged ${id}`,
  };
}

/** alice sends bob `count` real DMs; resolves with the bodies bob got, in order. */
async function realDms(alice: RawSocket, bob: RawSocket, mesh: TestMesh, tag: string, count: number) {
  for (let i = 0; i < count; i++)
    alice.send({
      type: 'send',
      id: `${tag}-${i}`,
      rid: `${tag}-${i}`,
      to: mesh.members[1]!.pubkey,
      body: `${tag}-${i}`,
    });
  const bodies: unknown[] = [];
  for (let i = 0; i < count; i++) bodies.push((await bob.next((frame) => frame.type === 'message')).body);
  return bodies;
}

/** Nothing but frames matching `allowed` reaches `socket` in `ms`, and it stays open. */
async function nothingReaches(socket: RawSocket, ms: number): Promise<void> {
  const unexpected = await within(
    socket.next(() => true, ms).catch(() => undefined),
    ms + 100,
    undefined,
  );
  expect(unexpected).toBeUndefined();
  expect(await within(socket.closed, 0, 'open')).toBe('open');
}

describe('a publisher without the bus secret (issue 25, item 1)', () => {
  it('unsigned: a presence.event carrying a message frame puts nothing on a socket', async () => {
    const { mesh, bob } = await twoPeers();
    const envelope = { from: 'trust-a', kind: 'presence.event', payload: forgedMessage(mesh, '77') };
    expect(await forger.publish(meshChannel(mesh.meshId), JSON.stringify(envelope))).toBeGreaterThan(0);
    await nothingReaches(bob, 500);
  });

  it('unsigned: delivery.wake with made-up frames at the next seqs writes nothing and loses no real DM', async () => {
    const { mesh, alice, bob } = await twoPeers();
    for (const seq of [1, 2]) {
      for (let memberId = 1; memberId <= 40; memberId++) {
        const payload = {
          frame: forgedMessage(mesh, `9${seq}`),
          seqs: [[memberId, seq]],
          publishedAt: Date.now(),
        };
        await forger.publish(
          nodeChannel('trust-b'),
          JSON.stringify({ from: 'trust-a', kind: 'delivery.wake', payload }),
        );
      }
    }
    expect(await realDms(alice, bob, mesh, 'after-wake', 3)).toEqual([
      'after-wake-0',
      'after-wake-1',
      'after-wake-2',
    ]);
  });

  it('unsigned: member.revoked for small member ids closes no socket', async () => {
    const { mesh, alice, bob } = await twoPeers();
    for (let memberId = 1; memberId <= 40; memberId++) {
      const envelope = { from: 'trust-a', kind: 'member.revoked', payload: { memberId } };
      await forger.publish(meshChannel(mesh.meshId), JSON.stringify(envelope));
    }
    expect(await within(bob.closed, 500, 'open')).toBe('open');
    expect(await within(alice.closed, 0, 'open')).toBe('open');
  });

  it('unsigned: presence.kick closes no socket', async () => {
    const { bob, bobSession } = await twoPeers();
    const envelope = { from: 'trust-a', kind: 'presence.kick', payload: { sessionId: bobSession } };
    await forger.publish(nodeChannel('trust-b'), JSON.stringify(envelope));
    expect(await within(bob.closed, 500, 'open')).toBe('open');
  });
});

/** `reason`'s count in mesh_broker_bus_rejected_total, scraped from the node's /metrics as Prometheus would. */
async function rejected(node: { url: string }, reason: string): Promise<number> {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  const line = new RegExp(
    `^mesh_broker_bus_rejected_total\\{[^}]*reason="${reason}"[^}]*\\} (\\d+)$`,
    'm',
  ).exec(text);
  if (!line) throw new Error(`no mesh_broker_bus_rejected_total{reason="${reason}"} on ${node.url}`);
  return Number(line[1]);
}

/** Publishes `text` on `channel` and waits until `node` counted it as rejected for `reason`. */
async function publishRejected(channel: string, text: string, node: InProcessNode, reason: string) {
  const before = await rejected(node, reason);
  expect(await forger.publish(channel, text)).toBeGreaterThan(0);
  await waitFor(async () => (await rejected(node, reason)) === before + 1, {
    what: `${node.nodeId} counting one ${reason}`,
  });
}

/** The forger's own stamps (a made-up boot), each new, so the replay guard is not what refuses them. */
let forgedStamps = 0;
const sealed = (secret: string, channel: string, kind: string, payload: unknown, ts?: number) => {
  const stamp = { boot: 'f0f0f0f0f0f0f0f0', n: ++forgedStamps };
  return seal({ current: secret }, channel, { from: 'trust-a', kind, payload, stamp }, ts);
};

describe('what every node drops and counts (mesh_broker_bus_rejected_total{reason})', () => {
  it('unsigned, wrong key, unknown version, stale, bad JSON: nothing reaches either peer, every DM arrives in order', async () => {
    const { mesh, alice, bob } = await twoPeers();
    const channel = meshChannel(mesh.meshId);
    const status = {
      type: 'peer.status',
      pubkey: mesh.members[0]!.pubkey,
      sessionId: randomUUID(),
      status: 'forged',
    };
    const unsigned = JSON.stringify({ from: 'trust-a', kind: 'presence.event', payload: status });
    await publishRejected(channel, unsigned, b, 'unsigned');
    await publishRejected(channel, sealed(WRONG_SECRET, channel, 'presence.event', status), b, 'bad_mac');
    const v3 = { ...JSON.parse(sealed(TEST_BUS_SECRET, channel, 'presence.event', status)), v: 3 };
    await publishRejected(channel, JSON.stringify(v3), b, 'unknown_version');
    const old = sealed(TEST_BUS_SECRET, channel, 'presence.event', status, Date.now() - 120_000);
    await publishRejected(channel, old, b, 'stale');
    await publishRejected(channel, '{"v":2,', b, 'bad_json');
    // Sealed for another mesh's channel: replayed on this one, its MAC does not hold.
    const elsewhere = sealed(TEST_BUS_SECRET, meshChannel(randomUUID()), 'presence.event', status);
    await publishRejected(channel, elsewhere, b, 'bad_mac');
    await nothingReaches(bob, 200);
    await nothingReaches(alice, 0);
    expect(await realDms(alice, bob, mesh, 'signed-1', 3)).toEqual([
      'signed-1-0',
      'signed-1-1',
      'signed-1-2',
    ]);
  });

  it('the right key but a kind the channel type does not carry: kind_not_allowed, the socket stays', async () => {
    const { mesh, alice, bob, bobSession } = await twoPeers();
    const channel = meshChannel(mesh.meshId);
    // A kick belongs on a node channel; on the mesh channel it is refused before any handler sees it.
    await publishRejected(
      channel,
      sealed(TEST_BUS_SECRET, channel, 'presence.kick', { sessionId: bobSession }),
      b,
      'kind_not_allowed',
    );
    const node = nodeChannel('trust-b');
    await publishRejected(
      node,
      sealed(TEST_BUS_SECRET, node, 'clock.tick', {
        type: 'clock.tick',
        tick: 1,
        simTime: 'x',
        speed: 1,
        epoch: 1,
      }),
      b,
      'kind_not_allowed',
    );
    await publishRejected(node, sealed(TEST_BUS_SECRET, node, 'no.such.kind', {}), b, 'kind_not_allowed');
    await nothingReaches(bob, 200);
    expect(await realDms(alice, bob, mesh, 'signed-2', 2)).toEqual(['signed-2-0', 'signed-2-1']);
  });

  it("the right key, a payload of another kind's shape (a message frame as a presence event): bad_payload", async () => {
    const { mesh, alice, bob } = await twoPeers();
    const channel = meshChannel(mesh.meshId);
    const message = forgedMessage(mesh, '55');
    await publishRejected(
      channel,
      sealed(TEST_BUS_SECRET, channel, 'presence.event', message),
      b,
      'bad_payload',
    );
    await publishRejected(channel, sealed(TEST_BUS_SECRET, channel, 'clock.tick', message), b, 'bad_payload');
    await publishRejected(
      channel,
      sealed(TEST_BUS_SECRET, channel, 'stream.data', message),
      b,
      'bad_payload',
    );
    const joined = {
      type: 'peer.joined',
      pubkey: mesh.members[0]!.pubkey,
      sessionId: randomUUID(),
      name: null,
    };
    await publishRejected(
      channel,
      sealed(TEST_BUS_SECRET, channel, 'member.revoked', joined),
      b,
      'bad_payload',
    );
    await nothingReaches(bob, 200);
    expect(await realDms(alice, bob, mesh, 'signed-3', 2)).toEqual(['signed-3-0', 'signed-3-1']);
  });

  it('a signed delivery.wake whose rows Postgres does not show writes nothing (the hint rule) and loses no DM', async () => {
    const { mesh, alice, bob } = await twoPeers();
    const node = nodeChannel('trust-b');
    // Even under the right key, a hint is written only once the feed's own read shows its row.
    for (const seq of [1, 2])
      for (let memberId = 1; memberId <= 40; memberId++) {
        const wake = {
          frame: forgedMessage(mesh, `9${seq}`),
          seqs: [[memberId, seq]],
          publishedAt: Date.now(),
        };
        await forger.publish(node, sealed(TEST_BUS_SECRET, node, 'delivery.wake', wake));
      }
    const notAFrame = { frame: { type: 'peer.joined' }, seqs: [[1, 1]], publishedAt: Date.now() };
    await publishRejected(node, sealed(TEST_BUS_SECRET, node, 'delivery.wake', notAFrame), b, 'bad_payload');
    await nothingReaches(bob, 200);
    expect(await realDms(alice, bob, mesh, 'signed-4', 3)).toEqual([
      'signed-4-0',
      'signed-4-1',
      'signed-4-2',
    ]);
  });

  it('a signed member.revoked or presence.kick closes nothing Postgres does not confirm; real ones still close', async () => {
    const { mesh, alice, bob, bobSession } = await twoPeers();
    const channel = meshChannel(mesh.meshId);
    for (let memberId = 1; memberId <= 40; memberId++)
      await forger.publish(channel, sealed(TEST_BUS_SECRET, channel, 'member.revoked', { memberId }));
    const node = nodeChannel('trust-b');
    await forger.publish(node, sealed(TEST_BUS_SECRET, node, 'presence.kick', { sessionId: bobSession }));
    expect(await within(bob.closed, 500, 'open')).toBe('open');
    expect(await within(alice.closed, 0, 'open')).toBe('open');
    expect(await realDms(alice, bob, mesh, 'signed-5', 2)).toEqual(['signed-5-0', 'signed-5-1']);
    // The same session connecting again on a: the real kick closes bob's old socket on b.
    const again = await rawSession(a.wsUrl, helloFrame(mesh, mesh.members[1]!, { sessionId: bobSession }));
    expect((await within(bob.closed, 5000, 'open')) as { code: number }).toMatchObject({ code: 4409 });
    // A real revocation through the admin API of a closes the member's socket wherever it is.
    const carol = await rawSession(b.wsUrl, helloFrame(mesh, mesh.members[0]!));
    const revoked = await a.admin(`/admin/meshes/${mesh.meshId}/members/${mesh.members[0]!.pubkey}/revoke`, {
      method: 'POST',
    });
    expect(revoked.status).toBe(200);
    expect((await within(carol.closed, 5000, 'open')) as { code: number }).toMatchObject({ code: 4403 });
    expect(await within(again.closed, 0, 'open')).toBe('open');
  });
});

describe('rotating BUS_SECRET (docs/runbooks/rotate-bus-secret.md)', () => {
  it('a real envelope captured on its channel and published again is refused (replayed): no second frame', async () => {
    const { mesh, alice, bob } = await twoPeers();
    const channel = meshChannel(mesh.meshId);
    bob.send({ type: 'stream.subscribe', rid: 'sub', stream: 'replay' });
    await bob.next((frame) => frame.rid === 'sub');
    // The forger listens on the mesh's channel as any client of this Redis can, and keeps what a node sent.
    const listener = new Redis('redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 });
    try {
      const captured: string[] = [];
      listener.on('message', (_channel, text) => captured.push(text));
      await listener.subscribe(channel);
      alice.send({ type: 'stream.publish', rid: 'pub', stream: 'replay', data: { q: 1 } });
      expect(await bob.next((frame) => frame.type === 'stream.data')).toMatchObject({ data: { q: 1 } });
      const envelope = await waitFor(() => captured.find((text) => text.includes('"q":1')), {
        what: 'the stream envelope on the bus',
      });
      await publishRejected(channel, envelope, b, 'replayed');
      await publishRejected(channel, envelope, b, 'replayed');
      // A real publish after the replays comes through, and is the next frame bob gets: no copy before it.
      alice.send({ type: 'stream.publish', rid: 'pub2', stream: 'replay', data: { q: 2 } });
      expect(await bob.next((frame) => frame.type === 'stream.data')).toMatchObject({ data: { q: 2 } });
    } finally {
      listener.disconnect();
    }
  });

  it('the old key is accepted while BUS_SECRET_PREVIOUS names it, and refused once it is dropped', async () => {
    const mesh = await createMesh(a, 2);
    const channel = meshChannel(mesh.meshId);
    const status = () => ({
      type: 'peer.status',
      pubkey: mesh.members[0]!.pubkey,
      sessionId: randomUUID(),
      status: 'rotating',
    });
    const rotating = {
      ...nodeEnv,
      NODE_ID: 'trust-c',
      BUS_SECRET: NEW_SECRET,
      BUS_SECRET_PREVIOUS: TEST_BUS_SECRET,
    };
    let c = await startNode({ kind: 'in-process', databaseUrl: db.url, env: rotating });
    try {
      const dave = await rawSession(c.wsUrl, helloFrame(mesh, mesh.members[1]!));
      const accepted = status();
      await forger.publish(channel, sealed(TEST_BUS_SECRET, channel, 'presence.event', accepted));
      expect(await dave.next((frame) => frame.type === 'peer.status')).toEqual(accepted);
      const sealedNew = status();
      await forger.publish(channel, sealed(NEW_SECRET, channel, 'presence.event', sealedNew));
      expect(await dave.next((frame) => frame.type === 'peer.status')).toEqual(sealedNew);
      dave.close();
      await c.stop();
      c = await startNode({
        kind: 'in-process',
        databaseUrl: db.url,
        env: { ...rotating, BUS_SECRET_PREVIOUS: '' },
      });
      const erin = await rawSession(c.wsUrl, helloFrame(mesh, mesh.members[1]!));
      await publishRejected(
        channel,
        sealed(TEST_BUS_SECRET, channel, 'presence.event', status()),
        c,
        'bad_mac',
      );
      await nothingReaches(erin, 200);
    } finally {
      await c.stop();
    }
  });
});
