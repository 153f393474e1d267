/**
 * The checks of the row "reads and home region" (`ha.regions`, docs/multi-region.md). Control-free: they
 * read the nodes' /metrics and drive a peer, nothing more.
 */
import { type Check, CheckFailed, metricsOf } from './check.js';
import { NotApplicable } from './context.js';

/** `mesh_broker_region_reads_total{pool="replica"}` of one node's scrape (0 when absent). */
function replicaReads(text: string): number {
  const sample = /^mesh_broker_region_reads_total\{[^}]*pool="replica"[^}]*\}\s+(\S+)/m.exec(text);
  return sample ? Number(sample[1]) : 0;
}

export const REGION_CHECKS: Check[] = [
  {
    name: 'peers-list-local-replica',
    flag: 'ha.regions',
    needsControl: false,
    async run(context) {
      // A node whose reads have a replica of their own reports its lag; a cluster without one has nothing
      // to show (n/a: one region, or DATABASE_READ_URL unset).
      let node: { id: string; url: string } | undefined;
      for (const candidate of context.target.nodes) {
        if (/^mesh_broker_replica_lag_seconds[{ ]/m.test(await metricsOf(candidate.url))) {
          node = candidate;
          break;
        }
      }
      if (!node) throw new NotApplicable('no node reads a replica (DATABASE_READ_URL unset everywhere)');
      const mesh = await context.mesh(1);
      const peer = await context.peer(node.url, mesh, mesh.members[0]!);
      const before = replicaReads(await metricsOf(node.url));
      const peers = await peer.peers();
      const after = replicaReads(await metricsOf(node.url));
      if (after <= before)
        throw new CheckFailed(
          `peers.list on ${node.id} was served by the primary: mesh_broker_region_reads_total{pool="replica"} stayed at ${before}`,
        );
      return `${peers.length} peer(s) listed from ${node.id}'s replica`;
    },
  },
];
