import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import type { RawSocket } from '../helpers/raw.js';

let db: TestDatabase;
let node: TestNode;
let mesh: TestMesh;
let socket: RawSocket;

beforeAll(async () => {
  db = await createTestDatabase('bad_input');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url });
  mesh = await createMesh(node, 3);
  socket = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!));
});
afterEach(closeAllClients);
afterAll(async () => {
  socket?.close();
  await node?.stop();
  await db?.drop();
});

async function errorFor(frame: unknown) {
  socket.send(frame);
  return socket.next((f) => f.type === 'error');
}

/** A healthy peer on the same node still gets served: a DM from a second member arrives. */
async function nodeStillServes() {
  const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
  const c = await connectPeer(node.wsUrl, mesh, mesh.members[2]!);
  const got = c.next('message');
  await b.send(mesh.members[2]!.pubkey, 'still here');
  expect((await got).body).toBe('still here');
}

describe('bad input on the WebSocket', () => {
  it.each([
    ['invalid JSON', '{"type": "send",', 'bad_request', 'invalid JSON'],
    ['a JSON array', '[1,2]', 'bad_request', 'a frame must be a JSON object'],
    ['a JSON string', '"hello"', 'bad_request', 'a frame must be a JSON object'],
    ['no type', { rid: 'a' }, 'bad_request', 'missing field "type"'],
    ['an unknown type', { type: 'teleport', rid: 'a' }, 'unknown_type', 'unknown frame type "teleport"'],
    [
      'a send without "to"',
      { type: 'send', id: 'x', body: 'b', rid: 'a' },
      'bad_request',
      'missing field "to"',
    ],
    [
      'a send with a numeric body',
      { type: 'send', id: 'x', to: '*', body: 5, rid: 'a' },
      'bad_request',
      'field "body"',
    ],
    [
      'a send with a bad target',
      { type: 'send', id: 'x', to: 'bob', body: 'b' },
      'bad_request',
      'field "to"',
    ],
    ['a send with an empty id', { type: 'send', id: '', to: '*', body: 'b' }, 'bad_request', 'field "id"'],
    ['an ack of a non-id', { type: 'ack', messageId: 'abc' }, 'bad_request', 'field "messageId"'],
    // A bare row id (the messageId before migration 0014) names no message: refused, never matched.
    ['an ack of a bare row id', { type: 'ack', messageId: '999999' }, 'bad_request', '<id>-<16 hex digits>'],
    [
      'an ack of an unknown message',
      { type: 'ack', messageId: '999999-0123456789abcdef', rid: 'a' },
      'not_found',
      'no message 999999-0123456789abcdef',
    ],
    ['a second hello', { type: 'hello', v: 1 }, 'bad_request', 'hello already accepted'],
    [
      'a lone surrogate',
      '{"type":"send","id":"\\ud800","to":"*","body":"x"}',
      'bad_request',
      'well-formed Unicode',
    ],
    ['a NUL character', '{"type":"send","id":"a\\u0000b","to":"*","body":"x"}', 'bad_request', 'without NUL'],
  ])('answers %s with an error frame and stays open', async (_name, frame, code, message) => {
    const error = await errorFor(frame);
    expect(error.code).toBe(code);
    expect(String(error.message)).toContain(message);
    if (typeof frame === 'object' && 'rid' in frame) expect(error.rid).toBe(frame.rid);
  });

  it('refuses a DM to a member that is not in the mesh, and to oneself', async () => {
    const unknown = await errorFor({ type: 'send', id: 'u1', to: 'ab'.repeat(32), body: 'x', rid: 'u' });
    expect(unknown).toMatchObject({ code: 'not_found', rid: 'u' });
    const self = await errorFor({ type: 'send', id: 'u2', to: mesh.members[0]!.pubkey, body: 'x' });
    expect(self).toMatchObject({ code: 'bad_request', message: 'cannot send a message to yourself' });
    const stored = await db.query('SELECT count(*)::int AS n FROM messages WHERE client_id IN ($1, $2)', [
      'u1',
      'u2',
    ]);
    expect(stored.rows[0]?.n).toBe(0);
  });

  it('refuses a body over the body limit with too_large, storing nothing', async () => {
    const error = await errorFor({ type: 'send', id: 'big', to: '*', body: 'x'.repeat(40 * 1024) });
    expect(error.code).toBe('too_large');
    const stored = await db.query('SELECT count(*)::int AS n FROM messages WHERE client_id = $1', ['big']);
    expect(stored.rows[0]?.n).toBe(0);
  });

  it('answers a binary frame with bad_request', async () => {
    socket.socket.send(Buffer.from([1, 2, 3]));
    expect(await socket.next((f) => f.type === 'error')).toMatchObject({ code: 'bad_request' });
    socket.send({ type: 'ping', rid: 'alive' });
    expect(await socket.next((f) => f.rid === 'alive')).toMatchObject({ type: 'pong' });
  });

  it('closes a frame over 64 KiB with 1009, and the node keeps serving everyone else', async () => {
    const big = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!));
    big.send({ type: 'send', id: 'huge', to: '*', body: 'x'.repeat(65 * 1024) });
    expect((await big.closed).code).toBe(1009);
    await nodeStillServes();
  });

  it('closes a socket that keeps sending garbage with 4400', async () => {
    const abuser = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!));
    for (let i = 0; i < 150; i++) abuser.send('not json');
    expect(await abuser.closed).toEqual({ code: 4400, reason: 'too many bad frames' });
    await nodeStillServes();
  });
});
