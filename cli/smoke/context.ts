/**
 * What a smoke check gets: the cluster under test (its load balancer, each node, its database and admin
 * token) and helpers that drive real peers through the SDK, exactly as a user's peers would.
 */
import { randomBytes } from 'node:crypto';
import { MeshClient } from '../../client/client.js';
import { generateMemberKeys, type MemberKeys } from '../../client/keys.js';

export interface SmokeTarget {
  lbUrl: string;
  nodes: Array<{ id: string; url: string }>;
  databaseUrl: string;
  adminToken: string;
  flagsEnv: string;
}

export interface SmokeMesh {
  meshId: string;
  members: MemberKeys[];
}

export class SmokeContext {
  private readonly clients: MeshClient[] = [];

  constructor(readonly target: SmokeTarget) {}

  wsUrl(httpUrl: string): string {
    return `${httpUrl.replace(/^http/, 'ws')}/ws`;
  }

  async mesh(count: number): Promise<SmokeMesh> {
    const call = async (path: string, body: unknown) => {
      const response = await fetch(`${this.target.nodes[0]!.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${this.target.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
      return (await response.json()) as Record<string, string>;
    };
    const { meshId } = await call('/admin/meshes', { name: `smoke-${randomBytes(5).toString('hex')}` });
    const members = Array.from({ length: count }, () => generateMemberKeys());
    for (const member of members) await call(`/admin/meshes/${meshId}/members`, { pubkey: member.pubkey });
    return { meshId: meshId!, members };
  }

  /** A connected peer on a given node (by URL), closed when the check ends. */
  async peer(url: string, mesh: SmokeMesh, member: MemberKeys, options: { reconnect?: boolean } = {}) {
    const client = new MeshClient({
      urls: [this.wsUrl(url)],
      meshId: mesh.meshId,
      keys: member,
      backoff: { initialMs: 50, maxMs: 500 },
      requestTimeoutMs: 5000,
      reconnect: options.reconnect ?? true,
    });
    this.clients.push(client);
    await client.connect();
    return client;
  }

  close(): void {
    for (const client of this.clients.splice(0)) client.close();
  }
}

/** Waits for `condition` up to `timeoutMs`; resolves false instead of throwing (a check reports it). */
export async function eventually(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
