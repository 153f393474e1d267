/**
 * What a smoke check gets: the cluster under test (its load balancer, each node, its database and admin
 * token) and helpers that drive real peers through the SDK, exactly as a user's peers would.
 */
import { randomBytes } from 'node:crypto';
import { generateMemberKeys, type MemberKeys, MeshClient } from '@mesh-broker/sdk';
import { createPool, type Pool } from '../../broker/db/pool.js';

/** A check that cannot run on this cluster (too few nodes, limits too high to reach): reported as `n/a`. */
export class NotApplicable extends Error {}

/**
 * A check the environment opted out of (its file gives no node control, or no watch target host), or one its
 * topology cannot show anything with (promotion moves flags, not the load balancer: lb-failback-dm behind a
 * load balancer that spreads sessions over nodes that do not deliver to each other):
 * reported as `skipped`, which meets any expectation, so an environment that must never have a node
 * crashed by a check (production) can still be smoke-tested and promoted, visibly without those checks.
 */
export class SkippedByEnvironment extends Error {}

/** How the checks of node failures crash, drain and restart a node; each resolves when done. */
export interface NodeControl {
  kill(nodeId: string): Promise<void>;
  stop(nodeId: string): Promise<void>;
  /** Resolves once the node is healthy again. */
  start(nodeId: string): Promise<void>;
}

export interface SmokeTarget {
  lbUrl: string;
  nodes: Array<{ id: string; url: string }>;
  databaseUrl: string;
  adminToken: string;
  flagsEnv: string;
  /** Absent: the environment does not let the checks crash its nodes, and those checks are n/a. */
  control?: NodeControl;
  /** An address of this machine the nodes can fetch, for a watch target the check serves (else n/a). */
  watchTargetHost?: string;
}

export interface SmokeMesh {
  meshId: string;
  members: MemberKeys[];
}

export class SmokeContext {
  private readonly clients: MeshClient[] = [];
  /** Nodes this check crashed or drained: started again when it ends, whatever its outcome. */
  private readonly downed = new Set<string>();
  private database: Pool | undefined;
  /** Set when the check's time is up: a check still running then may not stop nodes or open peers. */
  private closed = false;

  constructor(
    readonly target: SmokeTarget,
    /** Whether the check declared `needsControl`: only then may it crash, drain or restart nodes. */
    private readonly nodeControl = false,
  ) {}

  /** The environment's database, for what only it can tell (who fired an occurrence, who owns a watch). */
  db(): Pool {
    this.ensureOpen();
    this.database ??= createPool(this.target.databaseUrl, { max: 2, applicationName: 'workbench-smoke' });
    return this.database;
  }

  /** The live holder of the active lease (phase 1's "only one node runs background work"), if any. */
  async activeLeaseHolder(): Promise<string | undefined> {
    const result = await this.db().query<{ holder: string }>(
      "SELECT holder FROM cluster_leases WHERE name = 'active' AND expires_at > now()",
    );
    return result.rows[0]?.holder;
  }

  private ensureOpen(): void {
    if (this.closed) throw new Error('the check ran out of time; its context is closed');
  }

  private control() {
    this.ensureOpen();
    if (!this.nodeControl)
      throw new Error('this check does not declare needsControl: it may not crash, drain or start nodes');
    if (!this.target.control)
      throw new SkippedByEnvironment('the environment does not let checks stop its nodes (no control)');
    return this.target.control;
  }

  /** Crashes a node (SIGKILL or the environment's kill command). */
  async kill(nodeId: string): Promise<void> {
    const control = this.control();
    this.downed.add(nodeId);
    await control.kill(nodeId);
  }

  /** Drains and stops a node (SIGTERM or the environment's stop command). */
  async stop(nodeId: string): Promise<void> {
    const control = this.control();
    this.downed.add(nodeId);
    await control.stop(nodeId);
  }

  /** Starts a node this check stopped again (resolves once it is healthy); it is not restarted at the end. */
  async start(nodeId: string): Promise<void> {
    const control = this.control();
    await control.start(nodeId);
    this.downed.delete(nodeId);
  }

  /** The WebSocket URLs of every node, starting with `first`: a peer that fails over to the others. */
  urlsFrom(first: string): string[] {
    const urls = this.target.nodes.map((node) => node.url);
    const start = urls.indexOf(first);
    return [...urls.slice(start), ...urls.slice(0, start)];
  }

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

  /**
   * A connected peer on a given node (by URL; with several, it fails over to the next), closed when the
   * check ends.
   */
  async peer(
    url: string | string[],
    mesh: SmokeMesh,
    member: MemberKeys,
    options: { reconnect?: boolean; sessionId?: string } = {},
  ) {
    this.ensureOpen();
    const client = new MeshClient({
      urls: (Array.isArray(url) ? url : [url]).map((u) => this.wsUrl(u)),
      meshId: mesh.meshId,
      keys: member,
      sessionId: options.sessionId,
      backoff: { initialMs: 50, maxMs: 500 },
      requestTimeoutMs: 5000,
      reconnect: options.reconnect ?? true,
    });
    this.clients.push(client);
    await client.connect();
    return client;
  }

  /** Closes the check's peers and its database pool, and starts every node it stopped again. */
  async close(): Promise<void> {
    this.closed = true;
    for (const client of this.clients.splice(0)) client.close();
    const errors: string[] = [];
    for (const nodeId of this.downed) {
      await this.target
        .control!.start(nodeId)
        .catch((error: Error) => errors.push(`${nodeId}: ${error.message}`));
    }
    this.downed.clear();
    await this.database?.end();
    if (errors.length > 0) throw new Error(`could not start again: ${errors.join('; ')}`);
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
