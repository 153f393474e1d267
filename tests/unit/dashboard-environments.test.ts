/**
 * The dashboard shows one environment at a time (docs/observability.md § Environments and clusters): an
 * `environment` variable (one value, from the environment label set at scrape) and a `cluster` variable in it,
 * and every series selector of every Prometheus query (panels, annotations, the node variable) filtered by
 * both, so staging and production in one Prometheus are never summed or compared. The queries themselves are
 * evaluated against a real Prometheus by tests/cluster/prometheus.test.ts and
 * tests/cluster/prometheus-environments.test.ts.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { metricSelectors } from '../helpers/alert-rules.js';

interface Variable {
  name: string;
  type: string;
  multi?: boolean;
  includeAll?: boolean;
  query?: { query?: string } | string;
}
interface Dashboard {
  templating: { list: Variable[] };
  panels: Array<{ title: string; targets?: Array<{ expr?: string }> }>;
  annotations: { list: Array<{ name: string; datasource?: { type?: string }; target?: { expr?: string } }> };
}

const dashboard = JSON.parse(
  readFileSync(join(packageRoot(), 'dashboards', 'mesh-broker.json'), 'utf8'),
) as Dashboard;
const variable = (name: string) => dashboard.templating.list.find((v) => v.name === name);
const queryOf = (v: Variable | undefined) =>
  typeof v?.query === 'string' ? v.query : (v?.query?.query ?? '');

/** The selectors of an expression that do not filter on the dashboard's environment and cluster. */
function unscopedSelectors(expr: string): string[] {
  return metricSelectors(expr).filter(
    (selector) =>
      !selector.includes('environment="$environment"') || !selector.includes('cluster=~"$cluster"'),
  );
}

describe('dashboards/mesh-broker.json: one environment at a time', () => {
  it('has an environment variable (one value, never All) and a cluster variable within it', () => {
    const environment = variable('environment');
    expect(environment?.type).toBe('query');
    expect(environment?.multi).toBe(false);
    expect(environment?.includeAll).toBe(false);
    expect(queryOf(environment)).toBe('label_values(up{job="mesh-broker"}, environment)');
    expect(queryOf(variable('cluster'))).toBe(
      'label_values(up{job="mesh-broker",environment="$environment"}, cluster)',
    );
    // Defined before the variables and panels that use them (Grafana resolves them in order).
    const names = dashboard.templating.list.map((v) => v.name);
    expect(names.indexOf('environment')).toBeLessThan(names.indexOf('cluster'));
    expect(names.indexOf('cluster')).toBeLessThan(names.indexOf('node'));
  });

  it('filters every series selector of every Prometheus query by environment and cluster', () => {
    const queries = [
      ...dashboard.panels.flatMap((panel) =>
        (panel.targets ?? []).map((target) => ({ where: panel.title, expr: target.expr ?? '' })),
      ),
      ...dashboard.annotations.list
        .filter((a) => a.datasource?.type === 'prometheus')
        .map((a) => ({ where: `annotation ${a.name}`, expr: a.target?.expr ?? '' })),
      { where: 'variable node', expr: queryOf(variable('node')) },
    ];
    expect(queries.length).toBeGreaterThan(30);
    const problems = queries.flatMap(({ where, expr }) =>
      unscopedSelectors(expr).map((selector) => `${where}: ${selector}`),
    );
    expect(problems).toEqual([]);
  });

  it('compares flags within one cluster of one environment, as MeshFlagDisagreement does', () => {
    const agree = dashboard.panels.find((panel) => panel.title === 'Do the nodes agree?');
    expect(agree?.targets?.[0]?.expr).toContain(
      'count by (environment, cluster, flag) (count_values by (environment, cluster, flag)',
    );
  });

  it('the check refuses a query without the filters (the old node-up target)', () => {
    expect(unscopedSelectors('up{job="mesh-broker"}')).toEqual(['up{job="mesh-broker"}']);
    expect(unscopedSelectors('sum by (node) (mesh_broker_connections{node=~"$node"})')).toHaveLength(1);
    expect(unscopedSelectors('up{job="x",environment="$environment",cluster=~"$cluster"}')).toEqual([]);
  });
});
