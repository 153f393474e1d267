/**
 * What a smoke check is, and what checks share: each is named, drives real peers through the SDK against
 * chosen nodes, and checks one row of the state inventory (or a cluster property). A check throws
 * `CheckFailed` with what it saw, `NotApplicable` when the cluster cannot run it, and may return a note
 * (a measured time) printed with its pass.
 */
import type { MeshClient } from '../../client/client.js';
import { NotApplicable, type SmokeContext, type SmokeMesh } from './context.js';

export class CheckFailed extends Error {}

/** How long a check waits for something to arrive before it calls it missing (generous: machines are busy). */
export const DELIVERY_WAIT_MS = 3000;

export interface Check {
  name: string;
  /** The row of the state inventory (or the property) it checks. */
  row: string;
  /** Its own budget when it needs more than the default (it waits for failovers). */
  timeoutMs?: number;
  /** Resolves to a note printed with the pass (a measured time), or nothing. */
  run(context: SmokeContext): Promise<unknown>;
}

export interface TwoNodes {
  a: { id: string; url: string };
  b: { id: string; url: string };
  mesh: SmokeMesh;
  /** A peer of the mesh's first member on node a, and of its second member on node b. */
  onA: MeshClient;
  onB: MeshClient;
}

/**
 * The set-up of every cross-node check: a fresh mesh, one peer on each of the first two nodes. With
 * `failover`, each peer moves on to the other nodes when its own goes away.
 */
export async function onTwoNodes(
  context: SmokeContext,
  options: { failover?: boolean; members?: number } = {},
): Promise<TwoNodes> {
  const [a, b] = context.target.nodes;
  if (!a || !b) throw new NotApplicable('needs two nodes');
  const mesh = await context.mesh(options.members ?? 2);
  const at = (url: string) => (options.failover ? context.urlsFrom(url) : url);
  const onA = await context.peer(at(a.url), mesh, mesh.members[0]!);
  const onB = await context.peer(at(b.url), mesh, mesh.members[1]!);
  return { a, b, mesh, onA, onB };
}
