/**
 * The SDK's connect() as a library user meets it (issue 28 item 2): against a dead URL, a broker that
 * never answers, a refused hello, an abort; the connection state machine and the retry cap. Every
 * connect() here must settle: a guard turns a hang (the old SDK against a dead URL) into a failure.
 */
import { createServer, type Server } from 'node:net';
import { generateMemberKeys, MeshClient, MeshClosedError, MeshConnectError } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let node: TestNode;
let mesh: TestMesh;
const made: MeshClient[] = [];

beforeAll(async () => {
  db = await createTestDatabase('sdk_connect');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url });
  mesh = await createMesh(node, 2);
});
afterEach(() => {
  for (const client of made.splice(0)) client.close();
  closeAllClients();
});
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

function client(urls: string[], options: Partial<ConstructorParameters<typeof MeshClient>[0]> = {}) {
  const made1 = new MeshClient({ urls, meshId: mesh.meshId, keys: mesh.members[0]!, ...options });
  made.push(made1);
  return made1;
}

/** What connect() settled with, or 'did not settle' after `ms`. */
async function settled(promise: Promise<unknown>, ms: number): Promise<unknown> {
  const guard = new Promise((resolve) => setTimeout(() => resolve(`did not settle within ${ms} ms`), ms));
  return Promise.race([
    promise.then(
      () => 'resolved',
      (error: unknown) => error,
    ),
    guard,
  ]);
}

describe('connect() always settles', () => {
  it('rejects against a dead URL (refused TCP) with code unreachable within its timeout', async () => {
    const dead = `ws://127.0.0.1:${await freePort()}/ws`;
    const peer = client([dead], { retry: { initialDelayMs: 20, maxDelayMs: 50 } });
    const started = Date.now();
    const outcome = await settled(peer.connect({ timeoutMs: 1000 }), 5000);
    expect(outcome).toMatchObject({ code: 'unreachable' });
    expect(outcome).toBeInstanceOf(MeshConnectError);
    expect(Date.now() - started).toBeLessThan(3000);
    expect(peer.state).toBe('suspended');
  });
});
