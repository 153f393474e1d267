/**
 * The shipped shadow-agreement analyses (phases/phaseN/analysis-shadow.yaml, docs/flags.md § Shadow, issue 27
 * item 3) parse, name each flag the phase's expectations list under "shadow", read only metrics the brokers
 * export, and decide through the promotion's own code (cli/promotion/analysis/decide.ts): a ratio of 0.99
 * fails, 0.9995 with enough comparisons passes, no data or too few comparisons is inconclusive, never a pass.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import {
  countMeasurement,
  decideMetric,
  decideRun,
  emptyTally,
  judgeMeasurement,
  type MetricPhase,
  type QueryAnswer,
} from '../../cli/promotion/analysis/decide.js';
import { type AnalysisMetric, readAnalysisFile } from '../../cli/promotion/analysis/spec.js';

const PHASES = [0, 1, 2];
const fileOf = (phase: number) => join(packageRoot(), 'phases', `phase${phase}`, 'analysis-shadow.yaml');
const shadowFlags = (phase: number): string[] =>
  JSON.parse(readFileSync(join(packageRoot(), 'phases', `phase${phase}`, 'expectations.json'), 'utf8')).shadow
    .flags;

/** A metric measured `count` times with the same answer, decided as a promotion decides it. */
function decided(metric: AnalysisMetric, answer: QueryAnswer): MetricPhase {
  let tally = emptyTally();
  for (let i = 0; i < metric.count; i++) {
    tally = countMeasurement(tally, judgeMeasurement(metric, answer).outcome);
    const decision = decideMetric(metric, tally);
    if (decision.phase !== 'running') return decision.phase;
  }
  return decideMetric(metric, tally).phase;
}

describe('shadow agreement analyses', () => {
  it('parse, cover the flags each phase runs at shadow, and read metrics the brokers export', () => {
    const exported = readFileSync(join(packageRoot(), 'broker', 'metrics.ts'), 'utf8');
    expect(exported).toContain("name: 'mesh_broker_shadow_comparisons_total'");
    for (const phase of PHASES) {
      const { metrics } = readAnalysisFile(fileOf(phase));
      const flags = shadowFlags(phase);
      expect(flags.length, `phase ${phase}`).toBeGreaterThan(0);
      for (const flag of flags) {
        const about = metrics.filter((m) => m.query.includes(`flag="${flag}"`));
        expect(about.map((m) => m.name).sort(), `phase ${phase} ${flag}`).toEqual(
          [`shadow-agreement-${flag.slice(3)}`, `shadow-comparisons-${flag.slice(3)}`].sort(),
        );
      }
      for (const metric of metrics)
        for (const [series] of metric.query.matchAll(/mesh_[a-z_]+/g))
          expect(series).toBe('mesh_broker_shadow_comparisons_total');
    }
  });

  it('fails at 0.99, passes at 0.9995 with enough comparisons, and no data is never a pass', () => {
    const { metrics } = readAnalysisFile(fileOf(1));
    const ratio = metrics.find((m) => m.name === 'shadow-agreement-rate-limits')!;
    const count = metrics.find((m) => m.name === 'shadow-comparisons-rate-limits')!;
    expect(decided(ratio, { values: [0.99] })).toBe('failed');
    expect(decided(ratio, { values: [0] })).toBe('failed'); // comparisons, none agreeing (`or vector(0)`)
    expect(decided(ratio, { values: [0.9995] })).toBe('successful');
    expect(decided(count, { values: [5000] })).toBe('successful');
    expect(decideRun([decided(ratio, { values: [0.9995] }), decided(count, { values: [5000] })])).toBe(
      'successful',
    );
    // Agreeing, but on too few comparisons: not evidence.
    expect(decided(count, { values: [10] })).toBe('inconclusive');
    expect(decideRun([decided(ratio, { values: [1] }), decided(count, { values: [10] })])).toBe(
      'inconclusive',
    );
    // No comparisons at all: 0 / 0 is NaN, no series is an empty vector; both inconclusive.
    for (const none of [{ values: [Number.NaN] }, { values: [] }]) {
      expect(decided(ratio, none)).toBe('inconclusive');
      expect(decided(count, none)).toBe('inconclusive');
    }
  });
});
