import { generateMemberKeys } from '@mesh-broker/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let node: TestNode;

beforeAll(async () => {
  db = await createTestDatabase('admin');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url });
});
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

const count = async (table: string) => (await db.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]?.n;

describe('admin API', () => {
  it('refuses requests without a token or with a wrong one, changing nothing', async () => {
    for (const token of [null, 'wrong-token-wrong-token', '']) {
      const response = await node.admin('/admin/meshes', { body: { name: 'nope' }, token });
      expect(response.status).toBe(401);
      expect(await response.json()).toMatchObject({ error: 'unauthorized' });
    }
    expect(await count('meshes')).toBe(0);
  });

  it('creates a mesh, refuses a duplicate name and bad bodies', async () => {
    const created = await node.admin('/admin/meshes', { body: { name: 'alpha' } });
    expect(created.status).toBe(201);
    const mesh = (await created.json()) as { meshId: string; name: string };
    expect(mesh.name).toBe('alpha');
    const duplicate = await node.admin('/admin/meshes', { body: { name: 'alpha' } });
    expect(duplicate.status).toBe(409);
    expect(await duplicate.json()).toMatchObject({ error: 'conflict' });
    const bad = await node.admin('/admin/meshes', { body: { name: 42 } });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: 'bad_request' });
    const invalidJson = await fetch(`${node.url}/admin/meshes`, {
      method: 'POST',
      headers: { authorization: 'Bearer test-admin-token-0123456789', 'content-type': 'application/json' },
      body: '{"name": ',
    });
    expect(invalidJson.status).toBe(400);
    expect(await count('meshes')).toBe(1);
    const listed = (await (await node.admin('/admin/meshes')).json()) as { meshes: Array<{ name: string }> };
    expect(listed.meshes.map((m) => m.name)).toEqual(['alpha']);
  });

  it('adds, lists and revokes members with clear errors for bad input', async () => {
    const { meshId } = (await (await node.admin('/admin/meshes', { body: { name: 'beta' } })).json()) as {
      meshId: string;
    };
    const keys = generateMemberKeys();
    const added = await node.admin(`/admin/meshes/${meshId}/members`, {
      body: { pubkey: keys.pubkey, name: 'k' },
    });
    expect(added.status).toBe(201);
    expect(
      (await node.admin(`/admin/meshes/${meshId}/members`, { body: { pubkey: keys.pubkey } })).status,
    ).toBe(409);
    const badKey = await node.admin(`/admin/meshes/${meshId}/members`, { body: { pubkey: 'XYZ' } });
    expect(badKey.status).toBe(400);
    expect(((await badKey.json()) as { message: string }).message).toContain('pubkey');
    const noMesh = await node.admin('/admin/meshes/00000000-0000-4000-8000-000000000000/members', {
      body: { pubkey: generateMemberKeys().pubkey },
    });
    expect(noMesh.status).toBe(404);
    expect((await node.admin('/admin/meshes/not-a-uuid')).status).toBe(400);
    const members = (await (await node.admin(`/admin/meshes/${meshId}/members`)).json()) as {
      members: Array<{ pubkey: string; revokedAt: string | null }>;
    };
    expect(members.members).toEqual([
      expect.objectContaining({ pubkey: keys.pubkey, name: 'k', revokedAt: null }),
    ]);
    const revoked = await node.admin(`/admin/meshes/${meshId}/members/${keys.pubkey}/revoke`, {
      method: 'POST',
    });
    expect(revoked.status).toBe(200);
    expect(((await revoked.json()) as { revokedAt: string }).revokedAt).toBeTruthy();
    const missing = await node.admin(`/admin/meshes/${meshId}/members/${'cd'.repeat(32)}/revoke`, {
      method: 'POST',
    });
    expect(missing.status).toBe(404);
  });

  it('shows the cluster view with this node alive', async () => {
    const response = await node.admin('/admin/cluster');
    expect(response.status).toBe(200);
    const { nodes } = (await response.json()) as { nodes: Array<{ id: string; stoppedAt: string | null }> };
    expect(nodes).toEqual([expect.objectContaining({ id: node.nodeId, stoppedAt: null })]);
  });

  it('serves /metrics with the node label on every series', async () => {
    const text = await (await fetch(`${node.url}/metrics`)).text();
    const series = text.split('\n').filter((line) => line && !line.startsWith('#'));
    expect(series.length).toBeGreaterThan(10);
    for (const line of series) expect(line).toContain(`node="${node.nodeId}"`);
    expect(text).toContain('mesh_broker_connections');
  });
});
