import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let node: TestNode;

beforeAll(async () => {
  db = await createTestDatabase('hook');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

const post = (body: unknown) =>
  fetch(`${node.url}/hook/status`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

describe('POST /hook/status', () => {
  it("announces a session's status to its mesh and shows it in peers.list", async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const event = a.next('frame', (f) => f.type === 'peer.status');
    const response = await post({ sessionId: b.sessionId, status: 'working' });
    expect(response.status).toBe(200);
    expect(await event).toEqual({
      type: 'peer.status',
      pubkey: mesh.members[1]!.pubkey,
      sessionId: b.sessionId,
      status: 'working',
    });
    const peers = await a.peers();
    expect(peers.find((p) => p.sessionId === b.sessionId)).toMatchObject({ status: 'working' });
  });

  it('answers bad bodies with 400 and unknown sessions with 404', async () => {
    expect((await post({ sessionId: 'nope', status: 'x' })).status).toBe(400);
    expect((await post({ sessionId: '00000000-0000-4000-8000-000000000000' })).status).toBe(400);
    expect((await post('{"sessionId":')).status).toBe(400);
    const unknown = await post({ sessionId: '00000000-0000-4000-8000-000000000000', status: 'idle' });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ error: 'not_found' });
  });
});
