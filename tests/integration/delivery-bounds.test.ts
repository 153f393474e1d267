import { randomUUID } from 'node:crypto';
import { MeshRequestError } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { seriesValue } from '../helpers/verifier.js';
import { waitFor } from '../helpers/wait.js';

/**
 * What a member can make the node keep (docs/delivery.md § Retention and the backlog): a bounded backlog,
 * and nothing kept once nobody is owed it and the idempotency window has passed.
 */
let db: TestDatabase;
let node: InProcessNode;

beforeAll(async () => {
  db = await createTestDatabase('delivery_bounds');
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      BACKLOG_MAX: '5',
      MESSAGE_RETENTION_MS: '1500',
      RETENTION_INTERVAL_MS: '200',
      SEND_BURST: '100000',
      SEND_RATE_PER_MIN: '1000000',
    },
  });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

const count = async (sql: string, params: unknown[]) =>
  (await db.query<{ n: number }>(sql, params)).rows[0]!.n;

describe('the delivery backlog and retention', () => {
  it('refuses a DM to a member owed BACKLOG_MAX messages, skips it in a broadcast, and takes again once acked', async () => {
    const mesh = await createMesh(node, 3);
    const sender = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const full = mesh.members[1]!.pubkey;
    for (let i = 0; i < 5; i++) await sender.send(full, `owed ${i}`);
    const refused = await sender
      .request({ type: 'send', id: randomUUID(), to: full, body: 'one too many' })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(MeshRequestError);
    expect((refused as MeshRequestError).code).toBe('limit_exceeded');
    // A broadcast still reaches the member that has room, and skips the full one.
    const other = await connectPeer(node.wsUrl, mesh, mesh.members[2]!);
    const otherGot: string[] = [];
    other.on('message', (m) => otherGot.push(m.body));
    const broadcast = await sender.send('*', 'to all');
    expect(broadcast.recipients).toBe(1);
    await waitFor(() => otherGot.includes('to all'));
    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    expect(seriesValue(metrics, 'mesh_broker_backlog_refused_total', { kind: 'dm' })).toBe(1);
    expect(seriesValue(metrics, 'mesh_broker_backlog_refused_total', { kind: 'broadcast' })).toBe(1);
    // The member connects and acks what it is owed: there is room again.
    const member = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const got: string[] = [];
    member.on('message', (m) => got.push(m.body));
    await waitFor(() => got.length === 5, { what: 'the five owed messages' });
    await waitFor(
      async () =>
        (await count(
          'SELECT count(*)::int AS n FROM deliveries d JOIN members m ON m.id = d.member_id WHERE m.pubkey = $1',
          [full],
        )) === 0,
    );
    await sender.send(full, 'room again');
    await waitFor(() => got.includes('room again'));
  });

  it('removes what was acked past the retention, keeps what is still owed, and recognises a retry until then', async () => {
    const mesh = await createMesh(node, 3);
    const sender = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const online = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const got: string[] = [];
    online.on('message', (m) => got.push(m.body));
    const offline = mesh.members[2]!.pubkey;
    const id = randomUUID();
    const acked = await sender.request<{ type: string; messageId: string }>({
      type: 'send',
      id,
      to: mesh.members[1]!.pubkey,
      body: 'acked',
    });
    const owed = await sender.send(offline, 'still owed');
    await waitFor(() => got.includes('acked'));
    // Inside the window a retry of the same id is the same message.
    const retry = await sender.request<{ type: string; messageId: string }>({
      type: 'send',
      id,
      to: mesh.members[1]!.pubkey,
      body: 'acked',
    });
    expect(retry.messageId).toBe(acked.messageId);
    const rows = (messageId: string) =>
      count(`SELECT count(*)::int AS n FROM messages WHERE id || '-' || tag = $1`, [messageId]);
    await waitFor(async () => (await rows(acked.messageId)) === 0, {
      timeoutMs: 10_000,
      what: 'the acked message removed',
    });
    expect(await rows(owed.messageId)).toBe(1); // owed: kept, whatever its age
    expect(
      await count(
        `SELECT count(*)::int AS n FROM deliveries d JOIN messages m ON m.id = d.message_id
          WHERE m.id || '-' || m.tag = $1`,
        [owed.messageId],
      ),
    ).toBe(1);
    // The member connects later and still gets it; after its ack the message goes too.
    const late = await connectPeer(node.wsUrl, mesh, mesh.members[2]!);
    const lateGot: string[] = [];
    late.on('message', (m) => lateGot.push(m.body));
    await waitFor(() => lateGot.includes('still owed'));
    await waitFor(async () => (await rows(owed.messageId)) === 0, {
      timeoutMs: 10_000,
      what: 'the owed one removed after its ack',
    });
    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    expect(
      seriesValue(metrics, 'mesh_broker_retention_deleted_total', { what: 'messages' }),
    ).toBeGreaterThanOrEqual(2);
  });
});
