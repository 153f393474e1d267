/**
 * The promotion's analysis (issue 27 item 2), without a Prometheus: the condition language (no eval: a
 * parsed tree), the analysis file's checks (each problem named by its field), and the decisions (pass,
 * a failure within and past failureLimit, inconclusive, all errors, no data), with a scripted query and
 * time that does not pass.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { parseCondition } from '../../cli/promotion/analysis/conditions.js';
import {
  countMeasurement,
  decideMetric,
  emptyTally,
  judgeMeasurement,
  type QueryAnswer,
} from '../../cli/promotion/analysis/decide.js';
import { AnalysisMetrics } from '../../cli/promotion/analysis/metrics.js';
import { runAnalysis } from '../../cli/promotion/analysis/run.js';
import { type Analysis, analysisOf, readAnalysisFile } from '../../cli/promotion/analysis/spec.js';

describe('conditions', () => {
  it('compare result with numbers, joined by && and || (and, or), negated by ! (not)', () => {
    expect(parseCondition('result < 0.05').evaluate([0.01])).toBe(true);
    expect(parseCondition('result < 0.05').evaluate([0.05])).toBe(false);
    expect(parseCondition('result[0] >= 0.999').evaluate([0.9995, 0])).toBe(true);
    expect(parseCondition('result[1] == 0 && result[0] != 1').evaluate([2, 0])).toBe(true);
    expect(parseCondition('result > 1 || result <= 0').evaluate([0])).toBe(true);
    expect(parseCondition('!(result > 1) and not false or false').evaluate([1])).toBe(true);
    expect(parseCondition('result == 1.5e3').evaluate([1500])).toBe(true);
    // && binds tighter than ||.
    expect(parseCondition('true || false && false').evaluate([0])).toBe(true);
  });

  it('are parsed, never evaluated as code: anything else is a syntax error saying where', () => {
    const bad: Array<[string, RegExp]> = [
      ['', /empty/],
      ['result < ', /ends too early/],
      ['process.exit(1)', /unexpected "\." at 8/],
      ['exit(1)', /unexpected "exit" at 1/],
      ['result < 0.05; 1', /unexpected ";"/],
      ['result[x] > 1', /whole number/],
      ['result', /true or false/],
      ['result < 1 < 2', /unexpected "<"/],
      ['(result < 1) > 0', /compares numbers/],
      ['!result', /takes a condition/],
      ['result && true', /joins conditions/],
      ['`1`', /unexpected "`"/],
    ];
    for (const [text, message] of bad) expect(() => parseCondition(text), text).toThrow(message);
  });

  it('an unindexed result of several values, or an index past the end, is an evaluation error', () => {
    expect(() => parseCondition('result < 1').evaluate([0, 0])).toThrow(/2 values: index one/);
    expect(() => parseCondition('result[2] < 1').evaluate([0])).toThrow(
      /result\[2\]: the result has 1 values/,
    );
  });
});

const METRIC = {
  name: 'latency',
  interval: '1s',
  count: 3,
  successCondition: 'result < 0.1',
  failureCondition: 'result >= 0.2',
  provider: { prometheus: { query: 'max(up)' } },
};

describe('the analysis file', () => {
  it('reads the Argo form ({metrics} or a whole AnalysisTemplate) with Argo defaults', () => {
    const analysis = analysisOf({ metrics: [METRIC] }, 'test');
    expect(analysis.metrics[0]).toMatchObject({
      name: 'latency',
      query: 'max(up)',
      intervalMs: 1000,
      count: 3,
      initialDelayMs: 0,
      failureLimit: 0,
      consecutiveErrorLimit: 4,
      inconclusiveLimit: 0,
    });
    const template = analysisOf(
      {
        apiVersion: 'argoproj.io/v1alpha1',
        kind: 'AnalysisTemplate',
        metadata: { name: 'x' },
        spec: { metrics: [{ ...METRIC, initialDelay: '500ms' }] },
      },
      'test',
    );
    expect(template.metrics[0]!.initialDelayMs).toBe(500);
  });

  it('names the field of every problem', () => {
    const bad: Array<[unknown, string]> = [
      [{ metrics: [] }, 'metrics: '],
      [{ metrics: [{ ...METRIC, interval: '1 minute' }] }, 'metrics.0.interval: must be a duration'],
      [{ metrics: [{ ...METRIC, count: 0 }] }, 'metrics.0.count:'],
      [{ metrics: [{ ...METRIC, failureLimit: -1 }] }, 'metrics.0.failureLimit:'],
      [
        { metrics: [{ ...METRIC, successCondition: 'result <' }] },
        'metrics.0.successCondition: the condition ends too early',
      ],
      [
        { metrics: [{ ...METRIC, successCondition: undefined, failureCondition: undefined }] },
        'metrics.0: give successCondition, failureCondition or both',
      ],
      [
        { metrics: [{ ...METRIC, interval: undefined }] },
        'metrics.0.interval: needed when count is more than 1',
      ],
      [{ metrics: [{ ...METRIC, provider: { web: { url: 'x' } } }] }, 'metrics.0.provider'],
      [{ metrics: [{ ...METRIC, dryRun: true }] }, 'metrics.0: Unrecognized key: "dryRun"'],
      [{ metrics: [METRIC, METRIC] }, 'metrics.1.name: "latency" is there twice'],
      [{ kind: 'AnalysisTemplate', spec: { metrics: [{ ...METRIC, count: 'x' }] } }, 'spec.metrics.0.count:'],
    ];
    for (const [raw, message] of bad) expect(() => analysisOf(raw, 'test'), message).toThrow(message);
  });

  it('a missing or non-YAML file is named', () => {
    const dir = mkdtempSync(join(tmpdir(), 'wb-analysis-'));
    try {
      expect(() => readAnalysisFile(join(dir, 'nope.yaml'))).toThrow(
        /cannot read .*nope.yaml \(no such file\)/,
      );
      writeFileSync(join(dir, 'bad.yaml'), 'metrics: [\n');
      expect(() => readAnalysisFile(join(dir, 'bad.yaml'))).toThrow(/bad.yaml is not valid YAML/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("every phase's default analysis (phases/phaseN/analysis.yaml) is valid and reads only metrics that exist", () => {
    const phases = readdirSync(join(packageRoot(), 'phases')).filter((p) => /^phase\d$/.test(p));
    expect(phases).toHaveLength(5);
    const known = [
      ...readFileSync(join(packageRoot(), 'broker', 'metrics.ts'), 'utf8').matchAll(
        /name: '(mesh_[a-z_]+)'/g,
      ),
      ...readFileSync(join(packageRoot(), 'cli', 'verifier', 'metrics.ts'), 'utf8').matchAll(
        /name: '(mesh_[a-z_]+)'/g,
      ),
    ].map((m) => m[1]!);
    for (const phase of phases) {
      const analysis = readAnalysisFile(join(packageRoot(), 'phases', phase, 'analysis.yaml'));
      expect(analysis.metrics.length, phase).toBeGreaterThan(0);
      for (const metric of analysis.metrics)
        for (const [series] of metric.query.matchAll(/mesh_[a-z_]+/g))
          expect(known, `${phase} ${metric.name}: ${series}`).toContain(
            series.replace(/_(bucket|count|sum)$/, ''),
          );
    }
  });
});

/** A run whose query answers from a script, one answer per measurement, and whose time does not pass. */
async function scripted(metric: object, answers: QueryAnswer[]) {
  const analysis: Analysis = analysisOf({ metrics: [{ ...METRIC, ...metric }] }, 'test');
  let i = 0;
  const seen: string[] = [];
  const result = await runAnalysis({
    analysis,
    stage: 'bake',
    prometheusUrl: 'http://prometheus.invalid',
    query: async () => answers[i++] ?? { error: 'script ran out' },
    sleep: async () => {},
    onMeasurement: (m) => {
      seen.push(m.outcome);
    },
  });
  return { ...result, seen };
}

const v = (value: number): QueryAnswer => ({ values: [value] });

describe('the decisions', () => {
  it('passes when every measurement is successful', async () => {
    const run = await scripted({}, [v(0.01), v(0.02), v(0.05)]);
    expect(run).toMatchObject({ status: 'successful', seen: ['successful', 'successful', 'successful'] });
  });

  it('fails at the first failure past failureLimit, without waiting for the rest', async () => {
    const run = await scripted({ count: 5 }, [v(0.01), v(0.3), v(0.01), v(0.01), v(0.01)]);
    expect(run).toMatchObject({ status: 'failed', metric: 'latency', seen: ['successful', 'failed'] });
    expect(run.reason).toContain('1 failed, more than failureLimit 0');
  });

  it('a failure within failureLimit passes; one more fails', async () => {
    expect(await scripted({ failureLimit: 1 }, [v(0.3), v(0.01), v(0.01)])).toMatchObject({
      status: 'successful',
    });
    expect(await scripted({ failureLimit: 1 }, [v(0.3), v(0.01), v(0.3)])).toMatchObject({
      status: 'failed',
      seen: ['failed', 'successful', 'failed'],
    });
  });

  it('neither condition holding is inconclusive: it pauses past inconclusiveLimit', async () => {
    expect(await scripted({}, [v(0.15)])).toMatchObject({ status: 'inconclusive', seen: ['inconclusive'] });
    expect(await scripted({ inconclusiveLimit: 1 }, [v(0.15), v(0.01), v(0.01)])).toMatchObject({
      status: 'successful',
    });
  });

  it('no data (nothing, or NaN) is never a pass', async () => {
    const none = await scripted({ inconclusiveLimit: 5 }, [
      { values: [] },
      { values: [Number.NaN] },
      { values: [] },
    ]);
    expect(none).toMatchObject({
      status: 'inconclusive',
      seen: ['inconclusive', 'inconclusive', 'inconclusive'],
    });
    expect(none.reason).toContain('no successful measurement');
    // A failure condition alone, which no data would not meet: still no pass.
    const failureOnly = await scripted({ successCondition: undefined, count: 1 }, [{ values: [] }]);
    expect(failureOnly.status).toBe('inconclusive');
  });

  it('every measurement erroring is never a pass: within consecutiveErrorLimit inconclusive, past it at once', async () => {
    const errors = [{ error: 'down' }, { error: 'down' }, { error: 'down' }];
    const within = await scripted({}, errors);
    expect(within).toMatchObject({ status: 'inconclusive', seen: ['error', 'error', 'error'] });
    expect(within.reason).toContain('no successful measurement');
    const past = await scripted({ count: 5, consecutiveErrorLimit: 1 }, errors);
    expect(past).toMatchObject({ status: 'inconclusive', seen: ['error', 'error'] });
    expect(past.reason).toContain('2 measurements in a row errored');
    // An error between successes is counted, not held against the run.
    expect(await scripted({}, [v(0.01), { error: 'blip' }, v(0.01)])).toMatchObject({ status: 'successful' });
  });

  it('a condition that cannot be evaluated is an error measurement', () => {
    const metric = analysisOf({ metrics: [METRIC] }, 'test').metrics[0]!;
    expect(judgeMeasurement(metric, { values: [1, 2] })).toMatchObject({ outcome: 'error' });
    expect(judgeMeasurement(metric, { values: [0.01] })).toMatchObject({ outcome: 'successful' });
    // A success condition alone that does not hold is a failure (Argo).
    const only = analysisOf({ metrics: [{ ...METRIC, failureCondition: undefined }] }, 'test').metrics[0]!;
    expect(judgeMeasurement(only, { values: [0.5] })).toMatchObject({ outcome: 'failed' });
    expect(decideMetric(only, countMeasurement(emptyTally(), 'successful')).phase).toBe('running');
  });

  it('a failing metric stops the others at once; the run names it', async () => {
    const analysis = analysisOf(
      {
        metrics: [
          { ...METRIC, name: 'slow', count: 10 },
          { ...METRIC, name: 'bad', count: 10, successCondition: 'result == 0', failureCondition: undefined },
        ],
      },
      'test',
    );
    let queries = 0;
    const result = await runAnalysis({
      analysis,
      stage: 'baseline',
      prometheusUrl: 'http://prometheus.invalid',
      query: async () => {
        queries++;
        return v(0.01);
      },
      sleep: async () => {},
    });
    expect(result).toMatchObject({ status: 'failed', metric: 'bad' });
    expect(queries).toBeLessThan(5);
  });
});

describe('the measurements as series', () => {
  it('counts each by environment, metric, stage and outcome, and writes the text file whole', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wb-analysis-metrics-'));
    try {
      const file = join(dir, 'analysis.prom');
      const metrics = new AnalysisMetrics('staging', file);
      const base = { metric: 'latency', index: 1, count: 1, detail: '', at: '' };
      await metrics.record({ ...base, stage: 'baseline', outcome: 'successful', values: [0.02] });
      await metrics.record({ ...base, stage: 'bake', outcome: 'failed', values: [0.3] });
      const text = readFileSync(file, 'utf8');
      expect(text).toContain(
        'mesh_workbench_analysis_measurements_total{environment="staging",metric="latency",stage="baseline",outcome="successful"} 1',
      );
      expect(text).toContain(
        'mesh_workbench_analysis_last_value{environment="staging",metric="latency",stage="bake"} 0.3',
      );
      expect(readdirSync(dir)).toEqual(['analysis.prom']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
