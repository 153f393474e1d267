import { randomUUID } from 'node:crypto';
import { generateMemberKeys } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { RawSocket } from '../helpers/raw.js';

let db: TestDatabase;
let node: TestNode;
let mesh: TestMesh;

beforeAll(async () => {
  db = await createTestDatabase('hello');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url });
  mesh = await createMesh(node, 3);
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

async function helloRejection(hello: object) {
  const socket = await RawSocket.open(node.wsUrl);
  socket.send(hello);
  return socket.closed;
}

describe('hello', () => {
  it('welcomes a member with a valid signed hello', async () => {
    const sessionId = randomUUID();
    const socket = await RawSocket.open(node.wsUrl);
    socket.send({ ...helloFrame(mesh, mesh.members[0]!, { sessionId }), rid: 'h1' });
    const welcome = await socket.next();
    expect(welcome).toEqual({
      type: 'welcome',
      v: 1,
      meshId: mesh.meshId,
      sessionId,
      node: node.nodeId,
      resumed: false,
      heartbeatMs: 15000,
      rid: 'h1',
    });
    socket.close();
  });

  it('rejects a bad signature with 4401', async () => {
    const hello = helloFrame(mesh, mesh.members[0]!);
    const sig = (hello.sig[0] === '0' ? '1' : '0') + hello.sig.slice(1);
    expect(await helloRejection({ ...hello, sig })).toEqual({ code: 4401, reason: 'bad signature' });
  });

  it('rejects a hello signed by one key but naming another with 4401', async () => {
    const hello = helloFrame(mesh, mesh.members[0]!);
    expect((await helloRejection({ ...hello, pubkey: mesh.members[1]!.pubkey })).code).toBe(4401);
  });

  it('rejects an unknown member and an unknown mesh with 4401', async () => {
    expect(await helloRejection(helloFrame(mesh, generateMemberKeys()))).toEqual({
      code: 4401,
      reason: 'unknown member',
    });
    const otherMesh = { ...mesh, meshId: randomUUID() };
    expect((await helloRejection(helloFrame(otherMesh, mesh.members[0]!))).code).toBe(4401);
  });

  it('rejects stale and future timestamps beyond ±60 s with 4401, accepts within', async () => {
    const reason = 'timestamp outside the allowed skew';
    expect(await helloRejection(helloFrame(mesh, mesh.members[0]!, { ts: Date.now() - 61_000 }))).toEqual({
      code: 4401,
      reason,
    });
    expect(await helloRejection(helloFrame(mesh, mesh.members[0]!, { ts: Date.now() + 61_000 }))).toEqual({
      code: 4401,
      reason,
    });
    const socket = await rawSession(
      node.wsUrl,
      helloFrame(mesh, mesh.members[0]!, { ts: Date.now() - 50_000 }),
    );
    socket.close();
  });

  it('never accepts the same nonce twice (replayed hello)', async () => {
    const hello = helloFrame(mesh, mesh.members[0]!);
    const first = await rawSession(node.wsUrl, hello);
    expect(await helloRejection(hello)).toEqual({ code: 4401, reason: 'nonce already used' });
    // Even with a new session id, a reused nonce is refused (the signature then fails or the nonce does).
    const again = helloFrame(mesh, mesh.members[0]!, { nonce: hello.nonce });
    expect((await helloRejection(again)).code).toBe(4401);
    first.close();
  });

  it('closes a revoked member with 4403, live and on its next hello', async () => {
    const revoked = await createMesh(node, 2);
    const live = await rawSession(node.wsUrl, helloFrame(revoked, revoked.members[0]!));
    const response = await node.admin(
      `/admin/meshes/${revoked.meshId}/members/${revoked.members[0]!.pubkey}/revoke`,
      {
        method: 'POST',
      },
    );
    expect(response.status).toBe(200);
    expect(await live.closed).toEqual({ code: 4403, reason: 'member revoked' });
    expect(await helloRejection(helloFrame(revoked, revoked.members[0]!))).toEqual({
      code: 4403,
      reason: 'member revoked',
    });
  });

  it('replaces the older connection of the same member and session with 4409', async () => {
    const sessionId = randomUUID();
    const older = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!, { sessionId }));
    const newer = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!, { sessionId }));
    expect((await older.closed).code).toBe(4409);
    newer.send({ type: 'ping', rid: 'p' });
    expect((await newer.next()).type).toBe('pong');
    newer.close();
  });

  it('never lets another member take over a session', async () => {
    const sessionId = randomUUID();
    const owner = await connectPeer(node.wsUrl, mesh, mesh.members[0]!, { sessionId });
    const thief = await helloRejection(helloFrame(mesh, mesh.members[1]!, { sessionId }));
    expect(thief).toEqual({ code: 4401, reason: 'session belongs to another member' });
    expect(owner.connected).toBe(true);
    expect((await owner.request({ type: 'ping' })).type).toBe('pong');
  });

  it('answers a frame before hello with no_hello and a malformed hello with bad_request, staying open', async () => {
    const socket = await RawSocket.open(node.wsUrl);
    socket.send({ type: 'peers.list', rid: 'x' });
    expect(await socket.next()).toMatchObject({ type: 'error', code: 'no_hello', rid: 'x' });
    socket.send({ ...helloFrame(mesh, mesh.members[0]!), pubkey: 'XYZ', rid: 'y' });
    expect(await socket.next()).toMatchObject({ type: 'error', code: 'bad_request', rid: 'y' });
    const { sig: _sig, ...unsigned } = helloFrame(mesh, mesh.members[0]!);
    socket.send(unsigned);
    expect(await socket.next()).toMatchObject({
      type: 'error',
      code: 'bad_request',
      message: 'missing field "sig"',
    });
    socket.send(helloFrame(mesh, mesh.members[0]!));
    expect((await socket.next()).type).toBe('welcome');
    socket.close();
  });
});
