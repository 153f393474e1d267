import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { RawSocket } from '../helpers/raw.js';

let db: TestDatabase;
let node: TestNode;

beforeAll(async () => {
  db = await createTestDatabase('limits');
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: { MESH_CONNECTION_CAP: '2', HOOK_RATE_PER_MIN: '3' },
  });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

describe('limits on one node', () => {
  it('lets a member send a burst of 10, then refuses with rate_limited and stores nothing more', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) => a.send(mesh.members[1]!.pubkey, `m${i}`, { id: `burst-${i}` })),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(10);
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(refused).toHaveLength(2);
    for (const r of refused)
      expect(String(r.reason)).toMatch(/^MeshRequestError: rate_limited: sending too fast; retry in \d+ ms$/);
    const stored = await db.query('SELECT count(*)::int AS n FROM messages WHERE mesh_id = $1', [
      mesh.meshId,
    ]);
    expect(stored.rows[0]?.n).toBe(10);
    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    expect(metrics).toMatch(/mesh_broker_rate_limited_total\{kind="send",node="[^"]+"\} 2/);
  });

  it('closes a session over the mesh cap with 4408; a replacing connection does not count twice', async () => {
    const mesh = await createMesh(node, 3);
    const sessionId = randomUUID();
    const first = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!, { sessionId }));
    await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const over = await RawSocket.open(node.wsUrl);
    over.send(helloFrame(mesh, mesh.members[2]!));
    expect(await over.closed).toEqual({ code: 4408, reason: 'mesh at capacity' });
    // Same session again (a reconnect that replaces the socket): admitted, the old socket gets 4409.
    const replacing = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!, { sessionId }));
    expect((await first.closed).code).toBe(4409);
    // When a session goes, its place is free again.
    replacing.close();
    await replacing.closed;
    const third = await connectPeer(node.wsUrl, mesh, mesh.members[2]!);
    expect(third.connected).toBe(true);
  });

  it('rate limits POST /hook/status per session with 429', async () => {
    const mesh = await createMesh(node, 1);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const post = () =>
      fetch(`${node.url}/hook/status`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ sessionId: a.sessionId, status: 'working' }),
      });
    for (let i = 0; i < 3; i++) expect((await post()).status).toBe(200);
    const refused = await post();
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await refused.json()).toMatchObject({ error: 'rate_limited' });
  });
});
