/**
 * What a smoke check is, and what checks share: each is named, drives real peers through the SDK against
 * chosen nodes, and checks one row of the state inventory, named by its flag (or a cluster property). A
 * check throws `CheckFailed` with what it saw, `NotApplicable` when the cluster cannot run it, and may
 * return a note (a measured time) printed with its pass.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { MeshClient } from '@mesh-broker/sdk';
import { FLAGS, type FlagKey } from '../../flags/registry.js';
import { NotApplicable, type SmokeContext, type SmokeMesh } from './context.js';

export class CheckFailed extends Error {}

/** How long a check waits for something to arrive before it calls it missing (generous: machines are busy). */
export const DELIVERY_WAIT_MS = 3000;

/** One node's /metrics scrape, as text; a node that does not answer 200 fails the check. */
export async function metricsOf(url: string): Promise<string> {
  const response = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5000) });
  if (!response.ok) throw new CheckFailed(`${url}/metrics answered ${response.status}`);
  return response.text();
}

/** The sum of a counter's samples in a scrape whose labels include `label` (`row="connection-cap"`). */
export function counterSum(text: string, name: string, label: string): number {
  let total = 0;
  for (const match of text.matchAll(new RegExp(`^${name}\\{([^}]*)\\}\\s+(\\S+)`, 'gm')))
    if (match[1]!.split(',').includes(label)) total += Number(match[2]);
  return total;
}

interface CheckBody {
  name: string;
  /**
   * Whether it crashes, drains or restarts nodes. A check that does not say so cannot (its context
   * refuses); one that does is `skipped` where the environment gives no node control.
   */
  needsControl: boolean;
  /** Its own budget when it needs more than the default (it waits for failovers). */
  timeoutMs?: number;
  /** Resolves to a note printed with the pass (a measured time), or nothing. */
  run(context: SmokeContext): Promise<unknown>;
}

/**
 * A check of one state row, named by the row's flag (its text is the registry's), or a cross-cutting one
 * (`flag: null`: the flags themselves, plain session failover) that says in `property` what it checks.
 */
export type Check = CheckBody & ({ flag: FlagKey } | { flag: null; property: string });

/** The row a check stands for, as users read it: the registry's text of its flag, or its property. */
export function rowOf(check: Check): string {
  if (check.flag === null) return check.property;
  const flag = FLAGS.find((f) => f.key === check.flag);
  if (!flag) throw new Error(`check ${check.name}: no flag ${check.flag} in the registry`);
  return flag.row;
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

/**
 * A URL the nodes can fetch (on `host`, an address of the machine running the checks) whose body the check
 * changes: the target of the watch checks.
 */
export async function watchTarget(host: string) {
  let body = 'one';
  const server = createServer((_, response) => response.end(body));
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error) =>
      reject(new CheckFailed(`cannot serve a watch target on ${host}: ${error.message}`)),
    );
    server.listen(0, host, resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/smoke`,
    change(next: string) {
      body = next;
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}
