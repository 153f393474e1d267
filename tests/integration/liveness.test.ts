import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import { helloFrame } from '../helpers/hello.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { RawSocket } from '../helpers/raw.js';

let db: TestDatabase;
let node: TestNode;

beforeAll(async () => {
  db = await createTestDatabase('liveness');
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: { HEARTBEAT_MS: '200', PRESENCE_GRACE_MS: '200' },
  });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

describe('liveness', () => {
  it('drops a peer that stops answering pings, and its presence leaves after the grace period', async () => {
    const mesh = await createMesh(node, 2);
    const watcher = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const silent = await RawSocket.open(node.wsUrl, { autoPong: false });
    const hello = helloFrame(mesh, mesh.members[1]!);
    silent.send(hello);
    await silent.next((f) => f.type === 'welcome');
    const left = watcher.next('peer.left', (e) => e.sessionId === hello.sessionId, 5000);
    expect((await silent.closed).code).toBe(1006);
    await left;
    // The SDK answers pings (and sends its own), so the watcher itself is still connected.
    expect(watcher.connected).toBe(true);
  });
});
