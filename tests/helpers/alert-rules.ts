/**
 * The alert rules shipped with the dashboard (dashboards/alerts/*.rules.yml), read for the tests that check
 * them: tests/unit/alert-rules.test.ts (promtool, runbooks, registered metrics) and
 * tests/cluster/prometheus.test.ts (every expression against a real Prometheus scraping a cluster).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { packageRoot } from '../../broker/paths.js';

export const ALERTS_DIR = join(packageRoot(), 'dashboards', 'alerts');

export interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** The shipped rule files, absolute paths. */
export function alertRuleFiles(): string[] {
  return readdirSync(ALERTS_DIR)
    .filter((name) => name.endsWith('.rules.yml'))
    .map((name) => join(ALERTS_DIR, name))
    .sort();
}

/** Every alerting rule of the shipped files (recording rules, if any, left out). */
export function alertRules(): AlertRule[] {
  return alertRuleFiles().flatMap((file) =>
    (parse(readFileSync(file, 'utf8')) as { groups: Array<{ rules: AlertRule[] }> }).groups.flatMap((group) =>
      group.rules.filter((rule) => rule.alert),
    ),
  );
}

/**
 * The series selectors of an expression: each metric it reads (Prometheus's `up` or a `mesh_broker_` one)
 * with its label matchers, e.g. `up{job="audit-verifier"}`.
 */
export function metricSelectors(expr: string): string[] {
  return [...new Set([...expr.matchAll(/\b(up|mesh_broker_[a-z0-9_]+)\b(\{[^}]*\})?/g)].map((m) => m[0]))];
}

/** The metric names of an expression or a series selector. */
export function metricNames(text: string): string[] {
  return [...new Set([...text.matchAll(/\b(up|mesh_broker_[a-z0-9_]+)\b/g)].map((m) => m[1]!))];
}
