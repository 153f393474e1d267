import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { phasePreset } from '../../flags/registry.js';
import { alertRules, metricSelectors } from '../helpers/alert-rules.js';
import { TestCluster } from '../helpers/cluster.js';
import { helloFrame } from '../helpers/hello.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { startPrometheus, type TestPrometheus } from '../helpers/prometheus.js';
import { RawSocket } from '../helpers/raw.js';
import { startVerifier, type VerifierProcess } from '../helpers/verifier.js';
import { waitFor } from '../helpers/wait.js';

const root = packageRoot();
/** The environment and cluster labels of this test's targets. */
const SCOPE = { environment: 'phase3', cluster: 'local' };
/**
 * Series that exist only in some topologies: the replica lag only on a node whose reads go to a replica
 * (DATABASE_READ_URL, phase 4); its rule is evaluated here, its series not required.
 */
const TOPOLOGY_ONLY = ['mesh_broker_replica_lag_seconds'];

/** Every Prometheus configuration the project ships (Grafana's provisioning files are not Prometheus's). */
function shippedPrometheusConfigs(dir = root): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (['node_modules', 'dist', '.git', '.workbench', 'test-results', 'provisioning'].includes(entry.name))
      continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...shippedPrometheusConfigs(path));
    else if (/^prometheus.*\.ya?ml$/.test(entry.name)) found.push(path);
  }
  return found;
}

/**
 * Grafana's variables as Grafana fills them in: `$environment` this test's, `$cluster` and `$node` match-all,
 * `$__rate_interval` as it computes it for the datasource's default 15 s scrape interval (4 × 15 s), `$__interval`
 * for a 15-minute range.
 */
const substituteVariables = (expr: string) =>
  expr
    .replace(/\$\{?environment\}?/g, SCOPE.environment)
    .replace(/\$\{?cluster\}?/g, '.*')
    .replace(/\$\{?node\}?/g, '.*')
    .replace(/\$\{?__rate_interval\}?/g, '1m')
    .replace(/\$\{?__interval\}?/g, '2s');

/**
 * Every Prometheus query of the dashboard: each panel target's expr, and the Prometheus annotation's (which
 * has data only around a flag flip: it is evaluated, not required to have data).
 */
function dashboardQueries(): Array<{ panel: string; expr: string; mayBeEmpty?: boolean }> {
  const dashboard = JSON.parse(readFileSync(join(root, 'dashboards', 'mesh-broker.json'), 'utf8')) as {
    panels: Array<{ title: string; targets?: Array<{ expr?: string }> }>;
    annotations: { list: Array<{ name: string; datasource: { type?: string }; target?: { expr?: string } }> };
  };
  const panels = dashboard.panels.flatMap((panel) =>
    (panel.targets ?? []).map((target) => ({
      panel: panel.title,
      expr: substituteVariables(target.expr ?? ''),
    })),
  );
  const annotations = dashboard.annotations.list
    .filter((a) => a.datasource.type === 'prometheus')
    .map((a) => ({
      panel: `annotation ${a.name}`,
      expr: substituteVariables(a.target?.expr ?? ''),
      mayBeEmpty: true,
    }));
  return [...panels, ...annotations];
}

describe('shipped Prometheus configurations', () => {
  it('pass `promtool check config`', () => {
    const configs = shippedPrometheusConfigs();
    expect(configs.map((c) => relative(root, c))).toContain(join('dashboards', 'prometheus.yml'));
    for (const config of configs) {
      const check = spawnSync('promtool', ['check', 'config', config], { encoding: 'utf8' });
      expect(check.status, `${relative(root, config)}: ${check.stdout}${check.stderr}`).toBe(0);
    }
  });
});

describe('the Grafana dashboard against a real Prometheus scraping a local cluster', () => {
  let db: TestDatabase;
  let cluster: TestCluster;
  let verifier: VerifierProcess;
  let prometheus: TestPrometheus | undefined;
  let prometheusUrl = '';

  beforeAll(async () => {
    db = await createTestDatabase('prometheus');
    cluster = new TestCluster(db.url, {
      CLOCK_TICK_MS: '200',
      SCHEDULE_POLL_MS: '200',
      MESH_CONNECTION_CAP: '3',
      SEND_BURST: '4',
      SCHEDULE_MAX_PER_MEMBER: '2',
    });
    // Phase 3's flags: every row shared, so every ownership and fan-out series has something to say.
    const preset = phasePreset(3);
    cluster.setFlags(
      'phase3',
      Object.entries(preset)
        .filter(([, on]) => on)
        .map(([key]) => key as keyof typeof preset),
    );
    await Promise.all([cluster.start('p1', 'phase3'), cluster.start('p2', 'phase3')]);
    verifier = await startVerifier(db.url, ['--interval-ms', '500']);
    // The shipped configuration (its relabelling included), the targets labelled as a file_sd list is.
    const target = (url: string) => new URL(url).host;
    prometheus = await startPrometheus({
      'mesh-broker': [{ targets: [...cluster.nodes.values()].map((n) => target(n.url)), labels: SCOPE }],
      'audit-verifier': [{ targets: [target(verifier.url)], labels: SCOPE }],
    });
    prometheusUrl = prometheus.url;
  }, 90_000);

  afterAll(async () => {
    closeAllClients();
    await prometheus?.stop();
    await verifier?.stop();
    await cluster?.stop();
    await db?.drop();
  });

  it('answers every query of dashboards/mesh-broker.json with data after real traffic', async () => {
    const ws = (id: string) => cluster.node(id).wsUrl;
    const mesh = await cluster.createMesh(4);
    const [ma, mb, mc, md] = mesh.members;
    const a = await connectPeer(ws('p1'), mesh, ma!);
    const b = await connectPeer(ws('p2'), mesh, mb!);
    const c = await connectPeer(ws('p1'), mesh, mc!);
    const received: string[] = [];
    b.on('message', (m) => received.push(m.body));
    // Cross-node DMs (p1 → p2): remote deliveries and their fan-out latency.
    for (let i = 0; i < 3; i++) await a.send(mb!.pubkey, `dm ${i}`);
    await waitFor(() => received.length === 3, { what: 'three cross-node DMs' });
    // Streams: subscribed on p2, published on p1.
    const data: unknown[] = [];
    b.on('frame', (f) => f.type === 'stream.data' && data.push(f.data));
    await b.request({ type: 'stream.subscribe', stream: 'prices' });
    for (let i = 0; i < 3; i++) await a.request({ type: 'stream.publish', stream: 'prices', data: i });
    await waitFor(() => data.length === 3, { what: 'three cross-node stream frames' });
    // A clock (one leader), and a schedule that fires.
    await a.request({ type: 'clock.set', speed: 10 });
    await a.request({ type: 'schedule.create', to: mb!.pubkey, body: 'scheduled', at: Date.now() + 1500 });
    await waitFor(() => received.includes('scheduled'), { timeoutMs: 10_000, what: 'the scheduled message' });
    // Limits: a send burst over SEND_BURST, a schedule over the per-member quota, a hello over the cap.
    const burst = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => c.send(mb!.pubkey, `b${i}`)));
    expect(burst.some((r) => r.status === 'rejected')).toBe(true);
    const far = Date.now() + 3_600_000;
    const quota = await Promise.allSettled(
      [1, 2, 3].map((i) =>
        c.request({ type: 'schedule.create', to: ma!.pubkey, body: `q${i}`, at: far + i }),
      ),
    );
    expect(quota.filter((r) => r.status === 'rejected')).toHaveLength(1);
    const over = await RawSocket.open(ws('p2'));
    over.send(helloFrame(mesh, md!));
    expect(await over.closed).toMatchObject({ code: 4408 });
    // A reconnect: the same session comes back on the other node (within the presence grace period).
    c.close();
    await connectPeer(ws('p2'), mesh, mc!, { sessionId: c.sessionId });

    const queries = dashboardQueries();
    expect(queries.length).toBeGreaterThanOrEqual(30);
    // No variable left that Prometheus would choke on (or, worse, read as something else).
    for (const { panel, expr } of queries) expect(expr, panel).not.toContain('$');
    const empty = new Map<string, string>();
    await waitFor(
      async () => {
        empty.clear();
        for (const { panel, expr, mayBeEmpty } of queries) {
          const response = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
          const body = (await response.json()) as {
            status: string;
            error?: string;
            data?: { result: unknown[] };
          };
          if (body.status !== 'success') throw new Error(`${panel}: ${expr}: ${body.error}`);
          if ((body.data?.result.length ?? 0) === 0 && !mayBeEmpty) empty.set(expr, panel);
        }
        return empty.size === 0;
      },
      { timeoutMs: 30_000, intervalMs: 1000, what: 'data for every dashboard query' },
    ).catch((error) => {
      throw new Error(
        `${(error as Error).message}\nstill empty:\n${[...empty].map(([e, p]) => `  ${p}: ${e}`).join('\n')}`,
      );
    });
  }, 90_000);

  it('evaluates every alert rule of dashboards/alerts without error, reads only series the cluster has, and fires none', async () => {
    const query = async (expr: string) => {
      const response = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
      const body = (await response.json()) as {
        status: string;
        error?: string;
        data?: { result: unknown[] };
      };
      if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
      return body.data!.result;
    };
    const alerts = alertRules();
    // Every series a rule reads exists (with its label matchers): a misspelt metric or label value would make
    // the rule silently never fire. The traffic of the test above made the verifier's per-mesh series.
    const missing: string[] = [];
    await waitFor(
      async () => {
        missing.length = 0;
        for (const { alert, expr } of alerts)
          for (const selector of metricSelectors(expr))
            if (
              !TOPOLOGY_ONLY.some((name) => selector.startsWith(name)) &&
              (await query(`count(${selector})`)).length === 0
            )
              missing.push(`${alert}: ${selector}`);
        return missing.length === 0;
      },
      { timeoutMs: 20_000, intervalMs: 1000, what: 'every series the alert rules read' },
    ).catch((error) => {
      throw new Error(`${(error as Error).message}\nno series:\n  ${missing.join('\n  ')}`);
    });
    // Prometheus loaded and evaluated each rule (1 s evaluation interval) without an error.
    const evaluated = await waitFor(
      async () => {
        const response = await fetch(`${prometheusUrl}/api/v1/rules?type=alert`);
        const body = (await response.json()) as {
          data: {
            groups: Array<{
              rules: Array<{ name: string; health: string; lastError?: string; lastEvaluation: string }>;
            }>;
          };
        };
        const rules = body.data.groups.flatMap((group) => group.rules);
        return rules.every((rule) => !rule.lastEvaluation.startsWith('0001')) ? rules : undefined;
      },
      { timeoutMs: 10_000, what: 'an evaluation of every alert rule' },
    );
    expect(evaluated.map((rule) => rule.name).sort()).toEqual(alerts.map((a) => a.alert).sort());
    for (const rule of evaluated)
      expect(`${rule.name}: ${rule.health} ${rule.lastError ?? ''}`).toBe(`${rule.name}: ok `);
    // A healthy cluster: nothing firing, nothing pending.
    const active = (await (await fetch(`${prometheusUrl}/api/v1/alerts`)).json()) as {
      data: { alerts: Array<{ labels: Record<string, string>; state: string }> };
    };
    expect(active.data.alerts.map((a) => `${a.labels.alertname} ${a.state}`)).toEqual([]);
  }, 60_000);
});
