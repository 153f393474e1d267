import { randomBytes } from 'node:crypto';
import { generateMemberKeys, type MemberKeys, MeshClient, type MeshClientOptions } from '@mesh-broker/sdk';
import type { TestNode } from './broker.js';

export interface TestMesh {
  meshId: string;
  members: MemberKeys[];
}

/** A mesh with `count` members, made through the admin API as an operator would. */
export async function createMesh(node: Pick<TestNode, 'admin'>, count: number): Promise<TestMesh> {
  const created = await node.admin('/admin/meshes', {
    body: { name: `mesh-${randomBytes(4).toString('hex')}` },
  });
  if (created.status !== 201) throw new Error(`mesh create: ${created.status} ${await created.text()}`);
  const { meshId } = (await created.json()) as { meshId: string };
  const members: MemberKeys[] = [];
  for (let i = 0; i < count; i++) {
    const keys = generateMemberKeys();
    const added = await node.admin(`/admin/meshes/${meshId}/members`, { body: { pubkey: keys.pubkey } });
    if (added.status !== 201) throw new Error(`member add: ${added.status} ${await added.text()}`);
    members.push(keys);
  }
  return { meshId, members };
}

const clients: MeshClient[] = [];

/** A connected SDK client; `closeAllClients` in afterEach/afterAll closes every one made. */
export async function connectPeer(
  urls: string | string[],
  mesh: TestMesh,
  member: MemberKeys,
  options: Partial<MeshClientOptions> = {},
): Promise<MeshClient> {
  const client = new MeshClient({
    urls: Array.isArray(urls) ? urls : [urls],
    meshId: mesh.meshId,
    keys: member,
    backoff: { initialMs: 50, maxMs: 500 },
    ...options,
  });
  clients.push(client);
  await client.connect();
  return client;
}

export function closeAllClients(): void {
  for (const client of clients.splice(0)) client.close();
}
