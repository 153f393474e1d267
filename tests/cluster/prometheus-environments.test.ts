/**
 * Two environments at different phases scraped by ONE real Prometheus (issue 27 item 4, docs/observability.md
 * § Environments and clusters): production runs phase 1's flags, staging phase 3's, each its own database,
 * Redis prefix and broker processes, each listed in the file_sd list with its environment and cluster labels
 * (tests/helpers/prometheus.ts: the shipped dashboards/prometheus.yml and alert rules). The environments
 * differ on most flags by design: no MeshFlagDisagreement. Then a staging node that acts on ha.clock off
 * while its siblings have it on fires MeshFlagDisagreement for staging only, and a production broker killed
 * fires MeshBrokerNodeDown for production only, each naming its environment and cluster.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FLAG_KEYS, type FlagKey, phasePreset } from '../../flags/registry.js';
import { alertRules } from '../helpers/alert-rules.js';
import { TestCluster } from '../helpers/cluster.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { startPrometheus, type TestPrometheus } from '../helpers/prometheus.js';
import { pause, waitFor } from '../helpers/wait.js';

const PRODUCTION = { environment: 'production', cluster: 'prod-a' };
const STAGING = { environment: 'staging', cluster: 'staging-a' };
const presetOn = (phase: number): FlagKey[] => FLAG_KEYS.filter((key) => phasePreset(phase)[key]);
const hostOf = (url: string) => new URL(url).host;

describe('two environments at different phases in one Prometheus', () => {
  const dbs: TestDatabase[] = [];
  let production: TestCluster;
  let staging: TestCluster;
  let prometheus: TestPrometheus | undefined;

  beforeAll(async () => {
    const [productionDb, stagingDb] = await Promise.all([
      createTestDatabase('prom-env-production'),
      createTestDatabase('prom-env-staging'),
    ]);
    dbs.push(productionDb!, stagingDb!);
    production = new TestCluster(productionDb!.url);
    production.setFlags('production', presetOn(1));
    staging = new TestCluster(stagingDb!.url);
    staging.setFlags('staging', presetOn(3));
    // A staging node that did not take ha.clock (its own flags file): started later, in the second test.
    staging.setFlags(
      'staging-lagging',
      presetOn(3).filter((key) => key !== 'ha.clock'),
    );
    await Promise.all([
      production.start('p1', 'production'),
      production.start('p2', 'production'),
      staging.start('s1', 'staging'),
      staging.start('s2', 'staging'),
    ]);
    // s3's port is not known yet: its group is written when it starts (file_sd rereads the list).
    prometheus = await startPrometheus({
      'mesh-broker': [
        { targets: [...production.nodes.values()].map((n) => hostOf(n.url)), labels: PRODUCTION },
        { targets: [...staging.nodes.values()].map((n) => hostOf(n.url)), labels: STAGING },
      ],
    });
  }, 120_000);

  afterAll(async () => {
    await prometheus?.stop();
    await production?.stop();
    await staging?.stop();
    await Promise.all(dbs.map((db) => db.drop()));
  });

  it('keeps every series labelled with its environment and finds no disagreement across environments', async () => {
    const flags = await waitFor(
      async () => {
        const series = await prometheus!.query('mesh_broker_flag_enabled');
        return series.length === 4 * FLAG_KEYS.length ? series : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500, what: 'the flags of all four brokers scraped' },
    );
    // No scraped series without the labels set at scrape (ALERTS are the rules' own: an absent() alert has
    // no environment, MeshAuditVerifierDown here, as this test runs no verifier).
    for (const label of ['environment', 'cluster'])
      expect(
        await prometheus!.query(`count by (__name__) ({__name__=~".+",__name__!~"ALERTS.*",${label}=""})`),
        label,
      ).toEqual([]);
    // The environments really differ (phase 1 and phase 3): ha.delivery off in production, on in staging.
    const delivery = flags
      .filter((s) => s.metric.flag === 'ha.delivery')
      .map((s) => `${s.metric.environment}/${s.metric.node}=${s.value[1]}`)
      .sort();
    expect(delivery).toEqual(['production/p1=0', 'production/p2=0', 'staging/s1=1', 'staging/s2=1']);
    // The environment-blind comparison (the rule before issue 27) would see a disagreement; the shipped one does not.
    const blind = await prometheus!.query(
      'count by (flag) (count_values by (flag) ("value", mesh_broker_flag_enabled)) > 1',
    );
    expect(blind.length).toBeGreaterThan(0);
    const disagreement = rule('MeshFlagDisagreement');
    // A few evaluations (1 s each) with nothing pending.
    for (let i = 0; i < 5; i++) {
      expect(await prometheus!.query(disagreement)).toEqual([]);
      expect(
        (await prometheus!.alerts()).filter((a) => a.labels.alertname === 'MeshFlagDisagreement'),
      ).toEqual([]);
      await pause(1000, 'one more evaluation of the rules (1 s) with both environments scraped');
    }
    const build = await prometheus!.query('count by (environment, version) (mesh_broker_build_info)');
    expect(build.map((s) => `${s.metric.environment} ${s.value[1]}`).sort()).toEqual([
      'production 2',
      'staging 2',
    ]);
  }, 60_000);

  it('fires each alert in the environment it belongs to, and only there', async () => {
    await staging.start('s3', 'staging-lagging');
    const killed = production.node('p2').url;
    await production.kill('p2');
    await prometheus!.setTargets('mesh-broker', [
      { targets: [...production.nodes.values()].map((n) => hostOf(n.url)), labels: PRODUCTION },
      { targets: [...staging.nodes.values()].map((n) => hostOf(n.url)), labels: STAGING },
    ]);
    // Both rules have `for: 1m`: pending first, firing a minute later.
    const firing = await waitFor(
      async () => {
        const alerts = (await prometheus!.alerts()).filter((a) =>
          ['MeshFlagDisagreement', 'MeshBrokerNodeDown'].includes(a.labels.alertname!),
        );
        return alerts.length >= 2 && alerts.every((a) => a.state === 'firing') ? alerts : undefined;
      },
      { timeoutMs: 100_000, intervalMs: 1000, what: 'MeshFlagDisagreement and MeshBrokerNodeDown firing' },
    );
    const summary = firing.map((a) => ({
      alertname: a.labels.alertname,
      environment: a.labels.environment,
      cluster: a.labels.cluster,
      flag: a.labels.flag,
      instance: a.labels.instance,
      summary: a.annotations.summary,
    }));
    expect(summary.sort((a, b) => a.alertname!.localeCompare(b.alertname!))).toEqual([
      {
        alertname: 'MeshBrokerNodeDown',
        ...PRODUCTION,
        flag: undefined,
        instance: hostOf(killed),
        summary: `[production/prod-a] Broker ${hostOf(killed)} is down`,
      },
      {
        alertname: 'MeshFlagDisagreement',
        ...STAGING,
        flag: 'ha.clock',
        instance: undefined,
        summary: '[staging/staging-a] The nodes disagree on flag ha.clock',
      },
    ]);
    const runbook = firing.find((a) => a.labels.alertname === 'MeshFlagDisagreement')!.annotations
      .runbook_url;
    expect(runbook).toBe('https://runbooks.invalid/mesh-broker/flag-disagreement.md');
  }, 150_000);
});

/** The shipped expression of an alert. */
function rule(name: string): string {
  const found = alertRules().find((r) => r.alert === name);
  if (!found) throw new Error(`no alert ${name}`);
  return found.expr;
}
