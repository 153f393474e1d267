/**
 * The local cluster's Prometheus targets: `.workbench/prometheus/mesh-broker.yml`, a file_sd list of its
 * brokers labelled with the cluster's environment (its flags environment, FLAGS_ENV) and `cluster: local`
 * (with phase 4's regions, each node's `region` too), what a Prometheus of your own names in the mesh-broker
 * job's `files` (dashboards/prometheus.yml keeps only targets labelled so: docs/observability.md
 * § Environments and clusters). Rewritten with every write of cluster.json, so a restarted or added node is
 * in it; removed by `workbench down`.
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stateDir } from './state-dir.js';

/** The `cluster` label of a local cluster's targets. */
export const LOCAL_CLUSTER_LABEL = 'local';

export const prometheusTargetsPath = (cwd = process.cwd()) =>
  join(stateDir(cwd), 'prometheus', 'mesh-broker.yml');

interface Targeted {
  flagsEnv: string;
  nodes: Array<{ id: string; url: string; region?: string }>;
}

/** The file_sd groups of a cluster: one per region (one in phases 0-3). */
export function prometheusTargets(
  cluster: Targeted,
): Array<{ targets: string[]; labels: Record<string, string> }> {
  const byRegion = new Map<string, string[]>();
  for (const node of cluster.nodes) {
    const region = node.region ?? '';
    byRegion.set(region, [...(byRegion.get(region) ?? []), new URL(node.url).host]);
  }
  return [...byRegion].map(([region, targets]) => ({
    targets,
    labels: {
      environment: cluster.flagsEnv,
      cluster: LOCAL_CLUSTER_LABEL,
      ...(region ? { region } : {}),
    },
  }));
}

/** Written aside and renamed into place: Prometheus may read it at any moment. JSON is YAML. */
export function writePrometheusTargets(cwd: string, cluster: Targeted): void {
  const path = prometheusTargetsPath(cwd);
  mkdirSync(join(stateDir(cwd), 'prometheus'), { recursive: true, mode: 0o700 });
  const aside = `${path}.${process.pid}.tmp`;
  writeFileSync(aside, `${JSON.stringify(prometheusTargets(cluster), null, 2)}\n`);
  renameSync(aside, path);
}

export function removePrometheusTargets(cwd: string): void {
  rmSync(prometheusTargetsPath(cwd), { force: true });
}
