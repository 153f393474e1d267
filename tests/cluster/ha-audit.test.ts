import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame } from '../../protocol/frames.js';
import { runWorkbench } from '../helpers/cli.js';
import { TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer, type TestMesh } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let cluster: TestCluster;

beforeAll(async () => {
  db = await createTestDatabase('ha_audit');
  cluster = new TestCluster(db.url, { SEND_BURST: '100000', SEND_RATE_PER_MIN: '1000000' });
  cluster.setFlags('ha', []);
  await Promise.all(['a1', 'a2', 'a3'].map((id) => cluster.start(id, 'ha')));
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  await db?.drop();
});

type Verify = Frame & { valid: boolean; entries: number; forks: unknown[] };

/** Three peers, one per node, each sending `perPeer` messages at once: three writers of one chain. */
async function appendFromAllNodes(perPeer: number): Promise<{ mesh: TestMesh; peers: MeshClient[] }> {
  const mesh = await cluster.createMesh(3);
  const peers = await Promise.all(
    ['a1', 'a2', 'a3'].map((id, i) => connectPeer(cluster.node(id).wsUrl, mesh, mesh.members[i]!)),
  );
  await Promise.all(
    peers.map((peer, i) =>
      Promise.all(
        Array.from({ length: perPeer }, (_, n) => peer.send(mesh.members[(i + 1) % 3]!.pubkey, `m${n}`)),
      ),
    ),
  );
  return { mesh, peers };
}

async function verifyAll(peers: MeshClient[]): Promise<Verify> {
  // Each node flushes its queued entries of the mesh when asked; ask all three, then read the verdict.
  const results = await Promise.all(peers.map((peer) => peer.request<Verify>({ type: 'audit.verify' })));
  return results[results.length - 1]!;
}

describe('concurrent audit appends from three nodes', () => {
  it('fork the chain with ha.audit off (the documented gap)', async () => {
    const { mesh, peers } = await appendFromAllNodes(100);
    await verifyAll(peers);
    const verdict = await peers[0]!.request<Verify>({ type: 'audit.verify' });
    expect(verdict.valid).toBe(false);
    expect(verdict.forks.length).toBeGreaterThan(0);
    const cli = await runWorkbench(['audit', 'verify', '--mesh', mesh.meshId, '--database-url', db.url]);
    expect(cli.code).toBe(1);
  });

  it('keep one intact chain with ha.audit on', async () => {
    cluster.setFlags('ha', ['ha.audit']);
    for (const id of ['a1', 'a2', 'a3']) await cluster.waitActing(id, { 'ha.audit': true });
    const { mesh, peers } = await appendFromAllNodes(200);
    await verifyAll(peers);
    const verdict = await peers[0]!.request<Verify>({ type: 'audit.verify' });
    expect(verdict).toMatchObject({ valid: true, forks: [] });
    const sent = await db.query(
      "SELECT count(*)::int AS n FROM audit_log WHERE mesh_id = $1 AND event_type = 'message.sent'",
      [mesh.meshId],
    );
    expect(sent.rows[0]?.n).toBe(600);
    const cli = await runWorkbench(['audit', 'verify', '--mesh', mesh.meshId, '--database-url', db.url]);
    expect(cli.code).toBe(0);
    expect(cli.stdout).toMatch(/^ok\s/);
  });
});
