import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import type { NodeProcess } from '../helpers/cli.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let frozen: NodeProcess;
let healthy: TestNode;
let mesh: TestMesh;

beforeAll(async () => {
  db = await createTestDatabase('sdk_failover');
  frozen = await startNode({
    kind: 'process',
    databaseUrl: db.url,
    env: { NODE_ID: 'will-freeze', HEARTBEAT_MS: '300' },
  });
  healthy = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: { NODE_ID: 'healthy', HEARTBEAT_MS: '300' },
  });
  mesh = await createMesh(healthy, 2);
});
afterAll(async () => {
  closeAllClients();
  frozen?.process.kill('SIGCONT');
  frozen?.process.kill('SIGKILL');
  await healthy?.stop();
  await db?.drop();
});

describe('SDK reconnect over a list of URLs', () => {
  it('skips a URL where nothing listens and connects to the next one', async () => {
    const dead = `ws://127.0.0.1:${await freePort()}/ws`;
    const client = await connectPeer([dead, healthy.wsUrl], mesh, mesh.members[0]!);
    expect(client.node).toBe('healthy');
  });

  it('notices a frozen node by its silence and moves to the next URL, keeping its session', async () => {
    const client = await connectPeer([frozen.wsUrl, healthy.wsUrl], mesh, mesh.members[1]!);
    expect(client.node).toBe('will-freeze');
    const moved = client.next('welcome', (w) => w.node === 'healthy', 5000);
    const frozenAt = Date.now();
    frozen.process.kill('SIGSTOP');
    const welcome = await moved;
    expect(welcome.sessionId).toBe(client.sessionId);
    // Two silent heartbeats (600 ms) plus at most one more interval to notice, then the reconnect.
    expect(Date.now() - frozenAt).toBeLessThan(3000);
  });
});
