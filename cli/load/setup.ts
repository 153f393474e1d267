/**
 * The meshes of a load run, made through the admin API of the target (never straight in the database, so
 * it works against any environment): M meshes with fresh names, and N members with fresh keys, member i in
 * mesh i mod M.
 */
import { randomBytes } from 'node:crypto';
import { generateMemberKeys, type MemberKeys } from '@mesh-broker/sdk';

export interface LoadPeerPlan {
  index: number;
  meshId: string;
  keys: MemberKeys;
}

/** A few admin calls at a time: enough to be quick, few enough not to look like an attack. */
const CONCURRENCY = 8;

export async function createLoadMeshes(
  admin: { url: string; token: string },
  counts: { peers: number; meshes: number },
): Promise<LoadPeerPlan[]> {
  const call = async (path: string, body: unknown) => {
    const response = await fetch(`${admin.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${admin.token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    if (!response.ok) throw new Error(`admin ${path}: ${response.status} ${await response.text()}`);
    return (await response.json()) as Record<string, unknown>;
  };
  const run = randomBytes(4).toString('hex');
  const meshIds: string[] = [];
  for (let m = 0; m < counts.meshes; m++) {
    const mesh = await call('/admin/meshes', { name: `load-${run}-${m + 1}` });
    meshIds.push(String(mesh.meshId));
  }
  const plans: LoadPeerPlan[] = Array.from({ length: counts.peers }, (_, index) => ({
    index,
    meshId: meshIds[index % counts.meshes]!,
    keys: generateMemberKeys(),
  }));
  let next = 0;
  const worker = async () => {
    while (next < plans.length) {
      const plan = plans[next++]!;
      await call(`/admin/meshes/${plan.meshId}/members`, {
        pubkey: plan.keys.pubkey,
        name: `load-${run}-${plan.index + 1}`,
      });
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, plans.length) }, worker));
  return plans;
}
