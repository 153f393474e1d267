/**
 * `promote --dry-run`'s plan: what the promotion would do, read from the nodes and the expectations, with
 * nothing changed. Per node, each flag that would change (what the node acts on now, the target preset's
 * value); the checks before and after the flip with their expectations; and the analysis (each stage's
 * file and metrics, or none).
 */
import { FLAG_KEYS, type FlagKey, phasePreset } from '../../flags/registry.js';
import { type Environment, NODE_TIMEOUT_MS } from '../environments/environment.js';
import { CHECK_NAMES, type Expectations } from '../smoke/run.js';
import type { Analysis } from './analysis/spec.js';
import { describeAnalysis } from './analysis/stage.js';

/** The analysis a promotion would run: each stage's file, and the Prometheus it asks. */
export interface PlannedAnalysis {
  baseline?: { path: string; analysis: Analysis } | undefined;
  bake?: { path: string; analysis: Analysis } | undefined;
  prometheusUrl?: string | undefined;
}

function analysisLine(planned: PlannedAnalysis | undefined): string {
  if (!planned?.baseline || !planned.bake) return 'none (no --analysis)';
  return [
    `against ${planned.prometheusUrl}`,
    `baseline before the flip ${planned.baseline.path}: ${describeAnalysis(planned.baseline.analysis)}`,
    `bake after it ${planned.bake.path}: ${describeAnalysis(planned.bake.analysis)}`,
  ].join('; ');
}

export interface PromotionPlan {
  from: number;
  to: number;
  flagChanges: Array<{ node: string; changes: Array<{ flag: FlagKey; now: boolean | null; to: boolean }> }>;
  checks: { before: Array<{ name: string; expect: string }>; after: Array<{ name: string; expect: string }> };
  analysis: string;
}

const checksOf = (expectations: Expectations) =>
  CHECK_NAMES.map((name) => ({ name, expect: expectations.checks[name]?.expect ?? 'pass' }));

/** What each node acts on (null: it did not say), against the target preset: only the flags that change. */
async function flagChanges(environment: Environment, to: number): Promise<PromotionPlan['flagChanges']> {
  const target = phasePreset(to);
  return Promise.all(
    environment.target.nodes.map(async (node) => {
      const report = (await (
        await fetch(`${node.url}/flags`, { signal: AbortSignal.timeout(NODE_TIMEOUT_MS) })
      ).json()) as { flags: Record<string, { acting: boolean }> };
      const changes = FLAG_KEYS.map((flag) => ({
        flag,
        now: report.flags[flag]?.acting ?? null,
        to: target[flag],
      })).filter((change) => change.now !== change.to);
      return { node: node.id, changes };
    }),
  );
}

export async function planOf(
  environment: Environment,
  from: number,
  to: number,
  fromExpectations: Expectations,
  toExpectations: Expectations,
  analysis?: PlannedAnalysis,
): Promise<PromotionPlan> {
  return {
    from,
    to,
    flagChanges: await flagChanges(environment, to),
    checks: { before: checksOf(fromExpectations), after: checksOf(toExpectations) },
    analysis: analysisLine(analysis),
  };
}

/** The plan as text lines, for the CLI without --json. */
export function planLines(environment: string, plan: PromotionPlan): string[] {
  const lines = [
    `dry run: promote ${environment} from phase ${plan.from} to phase ${plan.to}; nothing changed`,
  ];
  lines.push('flag changes:');
  for (const { node, changes } of plan.flagChanges)
    lines.push(
      `  ${node}: ${changes.length === 0 ? 'none' : changes.map((c) => `${c.flag} ${c.now ?? '?'} → ${c.to}`).join(', ')}`,
    );
  for (const when of ['before', 'after'] as const) {
    const phase = when === 'before' ? plan.from : plan.to;
    lines.push(`checks ${when} the flip (phase ${phase}):`);
    lines.push(`  ${plan.checks[when].map((c) => `${c.name} ${c.expect}`).join(', ')}`);
  }
  lines.push(`analysis: ${plan.analysis}`);
  return lines;
}
