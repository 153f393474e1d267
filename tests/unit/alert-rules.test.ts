/**
 * The alert rules shipped with the dashboard (dashboards/alerts/*.rules.yml, docs/observability.md § Alerts):
 * the real `promtool check rules` and `promtool test rules` (dashboards/alerts/tests/*.yml) must pass; every
 * alert has a severity, a summary, a description and a runbook that exists and names it; every alert is
 * tested firing and not firing; and every metric a rule or a test series uses is one the code registers,
 * with labels it really has (read from the brokers' and the verifier's registries, not from a list kept
 * here). tests/cluster/prometheus.test.ts evaluates the same expressions against a real cluster.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import type { Registry } from 'prom-client';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { BrokerMetrics } from '../../broker/metrics.js';
import { packageRoot } from '../../broker/paths.js';
import { VerifierMetrics } from '../../cli/verifier/metrics.js';
import { ALERTS_DIR, alertRuleFiles, alertRules, metricNames } from '../helpers/alert-rules.js';

const root = packageRoot();
const TESTS = join(ALERTS_DIR, 'tests');
const SEVERITIES = ['critical', 'warning'];
/**
 * Labels Prometheus adds to every scraped series (job, instance), the target labels every file_sd group
 * carries (environment, cluster: dashboards/prometheus.yml keeps no target without them) and the registries'
 * default label.
 */
const TARGET_LABELS = ['job', 'instance', 'environment', 'cluster', 'node'];
/** The labels every aggregation keeps and every join matches on, so environments are never compared. */
const SCOPE = ['environment', 'cluster'];
const AGGREGATION =
  /\b(sum|min|max|avg|count|count_values|group|stddev|stdvar|topk|bottomk|quantile)\b\s*(?:(by|without)\s*\(([^)]*)\)\s*)?\(/g;
/**
 * runbook_url: the external label runbook_base (else the placeholder base) and the runbook's file name
 * (dashboards/alerts/mesh-broker.rules.yml's header).
 */
const RUNBOOK_URL =
  /^\{\{ with \$externalLabels\.runbook_base \}\}\{\{ \. \}\}\{\{ else \}\}(https:\/\/[^{}\s]+[^/])\{\{ end \}\}\/([a-z0-9-]+\.md)$/;

interface RuleTest {
  name?: string;
  input_series: Array<{ series: string; values: string }>;
  alert_rule_test?: Array<{ eval_time: string; alertname: string; exp_alerts: unknown[] }>;
}

const ruleFiles = alertRuleFiles();
const testFiles = readdirSync(TESTS)
  .filter((name) => name.endsWith('.yml'))
  .map((name) => join(TESTS, name));
const alerts = alertRules();
const ruleTests: RuleTest[] = testFiles.flatMap(
  (file) => (parse(readFileSync(file, 'utf8')) as { tests: RuleTest[] }).tests,
);

/** Every metric the brokers and the verifier register, with its label names. */
function registered(): Map<string, string[]> {
  const metrics = new Map<string, string[]>();
  const read = (registry: Registry) => {
    for (const metric of registry.getMetricsAsArray()) {
      const { labelNames } = metric as unknown as { labelNames?: string[] };
      metrics.set(metric.name, [...(labelNames ?? [])]);
    }
  };
  const brokers = new BrokerMetrics('alert-rules-test');
  // Registered only on a node whose reads go to a replica (broker/node/infrastructure.ts).
  brokers.replicaLagFrom(async () => 0);
  read(brokers.registry);
  read(new VerifierMetrics('alert-rules-test').registry);
  return metrics;
}

function promtool(...args: string[]) {
  return spawnSync('promtool', args, { cwd: root, encoding: 'utf8' });
}

beforeAll(() => {
  const setup = spawnSync('bash', [join(root, 'scripts', 'require-packages.sh'), 'prometheus'], {
    encoding: 'utf8',
  });
  if (setup.status !== 0)
    throw new Error(`promtool is needed for these tests: ${setup.stderr || setup.stdout}`);
}, 300_000);

describe('dashboards/alerts: the rule files', () => {
  it('pass `promtool check rules`', () => {
    expect(ruleFiles.length).toBeGreaterThan(0);
    for (const file of ruleFiles) {
      const check = promtool('check', 'rules', file);
      expect(check.status, `${relative(root, file)}: ${check.stdout}${check.stderr}`).toBe(0);
    }
  });

  it('pass their `promtool test rules` unit tests', () => {
    expect(testFiles.length).toBeGreaterThan(0);
    const run = promtool('test', 'rules', ...testFiles);
    expect(run.status, `${run.stdout}${run.stderr}`).toBe(0);
    expect(run.stdout).not.toContain('FAILED');
  });

  it('a rule that no longer does what its tests say makes `promtool test rules` fail, naming the alert', () => {
    // The same files in a temp folder, with MeshAuditChainBroken's threshold moved so one break is not enough.
    const dir = mkdtempSync(join(tmpdir(), 'wb-alert-rules-'));
    try {
      cpSync(ALERTS_DIR, dir, { recursive: true });
      const rules = join(dir, 'mesh-broker.rules.yml');
      const text = readFileSync(rules, 'utf8');
      const broken = text.replace(
        'max by (environment, cluster, mesh) (mesh_broker_audit_verifier_breaks) > 0',
        'max by (environment, cluster, mesh) (mesh_broker_audit_verifier_breaks) > 1',
      );
      expect(broken).not.toBe(text);
      writeFileSync(rules, broken);
      const run = spawnSync('promtool', ['test', 'rules', join(dir, 'tests', 'audit.test.yml')], {
        encoding: 'utf8',
      });
      expect(run.status).not.toBe(0);
      expect(`${run.stdout}${run.stderr}`).toContain('alertname: MeshAuditChainBroken');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('every alert has a severity, a summary, a description and a runbook that exists and names it', () => {
    expect(alerts.length).toBeGreaterThanOrEqual(10);
    expect(new Set(alerts.map((a) => a.alert)).size).toBe(alerts.length);
    const index = readFileSync(join(root, 'docs', 'runbooks', 'README.md'), 'utf8');
    for (const { alert, labels, annotations } of alerts) {
      expect(SEVERITIES, `${alert} severity`).toContain(labels?.severity);
      expect(annotations?.summary, `${alert} summary`).toBeTruthy();
      expect(annotations?.description, `${alert} description`).toBeTruthy();
      const url = RUNBOOK_URL.exec(annotations?.runbook_url ?? '');
      expect(url, `${alert} runbook_url: ${annotations?.runbook_url}`).not.toBeNull();
      expect(new URL(`${url![1]}/${url![2]}`).protocol).toBe('https:');
      const runbook = `docs/runbooks/${url![2]}`;
      expect(existsSync(join(root, runbook)), `${alert}: ${runbook} exists`).toBe(true);
      const text = readFileSync(join(root, runbook), 'utf8');
      expect(text.split('\n')[0], `${runbook} is titled with the alert`).toContain(alert);
      expect(index, `docs/runbooks/README.md lists ${runbook}`).toContain(
        `(${runbook.replace('docs/runbooks/', '')})`,
      );
    }
  });

  it('every aggregation keeps environment and cluster and every join matches on them (absent() excepted)', () => {
    const problems: string[] = [];
    for (const { alert, expr } of alerts) {
      for (const [, op, how, labels] of expr.matchAll(AGGREGATION)) {
        const kept = (labels ?? '').split(',').map((l) => l.trim());
        if (how !== 'by' || !SCOPE.every((l) => kept.includes(l)))
          problems.push(`${alert}: ${op} ${how ?? ''}(${labels ?? ''}) drops ${SCOPE.join(' or ')}`);
      }
      for (const [, how, labels] of expr.matchAll(/\b(on|ignoring)\s*\(([^)]*)\)/g)) {
        const matched = labels!.split(',').map((l) => l.trim());
        if (how !== 'on' || !SCOPE.every((l) => matched.includes(l)))
          problems.push(`${alert}: ${how} (${labels}) matches across environments`);
      }
      // Outside absent(), a selector never names an environment or cluster: the rules are the same everywhere.
      if (/\b(environment|cluster)\s*=/.test(expr)) problems.push(`${alert}: names an environment`);
    }
    expect(problems).toEqual([]);
    // The check itself: the old, environment-blind disagreement rule is refused.
    const old = 'count by (flag) (count_values by (flag) ("value", mesh_broker_flag_enabled)) > 1';
    expect(
      [...old.matchAll(AGGREGATION)].every(
        ([, , how, labels]) => how === 'by' && !labels!.includes('environment'),
      ),
    ).toBe(true);
  });

  it('every alert is tested both firing and not firing', () => {
    for (const { alert } of alerts) {
      const cases = ruleTests.flatMap((test) =>
        (test.alert_rule_test ?? []).filter((c) => c.alertname === alert),
      );
      expect(
        cases.some((c) => c.exp_alerts.length > 0),
        `${alert}: a case where it fires`,
      ).toBe(true);
      expect(
        cases.some((c) => c.exp_alerts.length === 0),
        `${alert}: a case where it does not`,
      ).toBe(true);
    }
  });

  it('every metric a rule or a test series uses is registered by the brokers or the verifier, with its labels', () => {
    const known = registered();
    expect(known.size).toBeGreaterThan(20);
    known.set('up', []); // Prometheus's own, per target
    const problems: string[] = [];
    for (const { alert, expr } of alerts) {
      const names = metricNames(expr);
      expect(names.length, `${alert} uses a metric`).toBeGreaterThan(0);
      for (const name of names)
        if (!known.has(name)) problems.push(`${alert}: ${name} is not a metric of the code`);
      // Labels the expression matches or groups on belong to one of its metrics.
      const labelsUsed = [
        ...[...expr.matchAll(/\{([^}]*)\}/g)].flatMap((m) =>
          [...m[1]!.matchAll(/(\w+)\s*=~?/g)].map((l) => l[1]!),
        ),
        ...[...expr.matchAll(/\bby\s*\(([^)]*)\)/g)].flatMap((m) => m[1]!.split(',').map((l) => l.trim())),
      ];
      const available = new Set([...TARGET_LABELS, ...names.flatMap((name) => known.get(name) ?? [])]);
      for (const label of labelsUsed)
        if (!available.has(label))
          problems.push(`${alert}: label ${label} is on none of ${names.join(', ')}`);
    }
    for (const test of ruleTests)
      for (const { series } of test.input_series) {
        const [name] = metricNames(series);
        if (!name || !known.has(name)) {
          problems.push(`test "${test.name}": series ${series} is not a metric of the code`);
          continue;
        }
        for (const [, label] of series.matchAll(/(\w+)="/g))
          if (!TARGET_LABELS.includes(label!) && !known.get(name)!.includes(label!))
            problems.push(`test "${test.name}": ${name} has no label ${label}`);
      }
    expect(problems).toEqual([]);
  });

  it('the jobs the rules name are the jobs dashboards/prometheus.yml scrapes', () => {
    const config = parse(readFileSync(join(root, 'dashboards', 'prometheus.yml'), 'utf8')) as {
      scrape_configs: Array<{ job_name: string }>;
    };
    const jobs = config.scrape_configs.map((c) => c.job_name);
    for (const { alert, expr } of alerts)
      for (const [, job] of expr.matchAll(/job="([^"]+)"/g))
        expect(jobs, `${alert}: job ${job}`).toContain(job);
  });
});
