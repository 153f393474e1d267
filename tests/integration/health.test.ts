import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMigrations } from '../../broker/db/migrate.js';
import type { TestNode } from '../helpers/broker.js';
import { helloFrame } from '../helpers/hello.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { ThrowawayPostgres } from '../helpers/pg-cluster.js';
import { RawSocket } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';

let postgres: ThrowawayPostgres;
let node: TestNode;

beforeAll(async () => {
  postgres = await ThrowawayPostgres.create();
  await runMigrations(postgres.url); // as its owner, before the node: brokers run no DDL
  node = await startNode({ kind: 'in-process', databaseUrl: postgres.url });
});
afterAll(async () => {
  closeAllClients();
  await node?.stop();
  postgres?.destroy();
});

async function health() {
  const response = await fetch(`${node.url}/health`);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

describe('/health', () => {
  it('answers 200 with node, db and redis while Postgres answers', async () => {
    expect(await health()).toEqual({
      status: 200,
      body: { status: 'ok', node: node.nodeId, db: 'up', redis: 'up', backgroundWork: 'active' },
    });
  });

  it('/health/active: with ha.active-lease off every healthy node passes it (phase 1 routing follows the lease)', async () => {
    const response = await fetch(`${node.url}/health/active`);
    expect({ status: response.status, body: await response.json() }).toEqual({
      status: 200,
      body: {
        status: 'ok',
        node: node.nodeId,
        db: 'up',
        redis: 'up',
        backgroundWork: 'active',
        activeLease: 'off',
      },
    });
  });

  it('answers 503 while Postgres is down and 200 again once it is back, without a restart', async () => {
    const mesh = await createMesh(node, 2);
    postgres.stop();
    const down = await waitFor(async () => {
      const h = await health();
      return h.status === 503 ? h : undefined;
    });
    expect(down.body).toMatchObject({ status: 'unavailable', node: node.nodeId, db: 'down' });
    expect((await fetch(`${node.url}/health/active`)).status).toBe(503);
    expect(await (await fetch(`${node.url}/metrics`)).text()).toMatch(/mesh_broker_db_up\{node="[^"]+"\} 0/);
    // A hello meanwhile is closed with 1011 (retry), not left hanging nor refused as if it were bad.
    const socket = await RawSocket.open(node.wsUrl);
    socket.send(helloFrame(mesh, mesh.members[0]!));
    expect((await socket.closed).code).toBe(1011);

    postgres.start();
    await waitFor(async () => (await health()).status === 200, { timeoutMs: 15_000, what: 'health 200' });
    // And the node really serves again: a peer connects and messages flow.
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const got = b.next('message');
    await a.send(mesh.members[1]!.pubkey, 'after the outage');
    expect((await got).body).toBe('after the outage');
  });
});
