import { randomUUID } from 'node:crypto';
import { generateMemberKeys } from '@mesh-broker/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN } from '../helpers/broker.js';
import type { NodeProcess } from '../helpers/cli.js';
import { closeAllClients, connectPeer, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let node: NodeProcess;

beforeAll(async () => {
  db = await createTestDatabase('drain');
  node = await startNode({ kind: 'process', databaseUrl: db.url, env: { NODE_ID: 'drain-a' } });
});
afterAll(async () => {
  closeAllClients();
  if (node?.process.exitCode === null) node.process.kill('SIGKILL');
  await db?.drop();
});

async function admin(path: string, body?: unknown) {
  const response = await fetch(`${node.url}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return response.json() as Promise<Record<string, string>>;
}

describe('SIGTERM drain of a broker process', () => {
  it('closes every peer with 1001, clears only its own presence rows and exits within 10 s', async () => {
    const { meshId } = await admin('/admin/meshes', { name: 'drain' });
    const mesh: TestMesh = {
      meshId: meshId!,
      members: [generateMemberKeys(), generateMemberKeys(), generateMemberKeys()],
    };
    for (const member of mesh.members)
      await admin(`/admin/meshes/${meshId}/members`, { pubkey: member.pubkey });
    // A session held by another node: its row must survive this node's shutdown.
    const otherSession = randomUUID();
    await db.query(
      `INSERT INTO presence (session_id, mesh_id, member_id, node_id)
       SELECT $1, $2, id, 'other-node' FROM members WHERE pubkey = $3`,
      [otherSession, meshId, mesh.members[2]!.pubkey],
    );
    const peers = await Promise.all(
      mesh.members.slice(0, 2).map((m) => connectPeer(node.wsUrl, mesh, m, { reconnect: false })),
    );
    const closes = peers.map((peer) => peer.next('disconnected'));
    const rowsBefore = await db.query('SELECT node_id FROM presence ORDER BY node_id');
    expect(rowsBefore.rows.map((r) => r.node_id)).toEqual(['drain-a', 'drain-a', 'other-node']);

    const started = Date.now();
    node.process.kill('SIGTERM');
    for (const close of await Promise.all(closes))
      expect(close).toMatchObject({ code: 1001, reason: 'node draining' });
    expect(await node.exited).toBe(0);
    expect(Date.now() - started).toBeLessThan(10_000);

    const rowsAfter = await db.query('SELECT session_id, node_id FROM presence');
    expect(rowsAfter.rows).toEqual([{ session_id: otherSession, node_id: 'other-node' }]);
    const nodeRow = await db.query('SELECT stopped_at FROM nodes WHERE id = $1', ['drain-a']);
    expect(nodeRow.rows[0]?.stopped_at).toBeInstanceOf(Date);
    expect(node.output()).toContain('"node":"drain-a"');
  });
});

describe('a drain paces its closes (DRAIN_CLOSE_PER_SEC)', () => {
  it('closes 12 peers at 20 a second, one batch every 50 ms, all with 1001, and still exits 0', async () => {
    const paced = await startNode({
      kind: 'process',
      databaseUrl: db.url,
      env: { NODE_ID: 'drain-paced', DRAIN_CLOSE_PER_SEC: '20' },
    });
    try {
      const created = await fetch(`${paced.url}/admin/meshes`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'paced' }),
      });
      const { meshId } = (await created.json()) as { meshId: string };
      const mesh: TestMesh = { meshId, members: Array.from({ length: 12 }, () => generateMemberKeys()) };
      for (const member of mesh.members) {
        await fetch(`${paced.url}/admin/meshes/${meshId}/members`, {
          method: 'POST',
          headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ pubkey: member.pubkey }),
        });
      }
      const peers = await Promise.all(
        mesh.members.map((m) => connectPeer(paced.wsUrl, mesh, m, { reconnect: false })),
      );
      const closedAt = peers.map((peer) =>
        peer.next('disconnected').then((close) => ({ close, at: Date.now() })),
      );
      paced.process.kill('SIGTERM');
      const closes = await Promise.all(closedAt);
      for (const { close } of closes) expect(close).toMatchObject({ code: 1001, reason: 'node draining' });
      const times = closes.map(({ at }) => at);
      // 20 a second is one close per 50 ms batch: twelve batches, the last at least 11 × 50 ms after the
      // first (timers never fire early). All at once (the old drain) spreads them over a few ms.
      expect(Math.max(...times) - Math.min(...times)).toBeGreaterThanOrEqual(500);
      expect(await paced.exited).toBe(0);
    } finally {
      if (paced.process.exitCode === null) paced.process.kill('SIGKILL');
    }
  });
});
