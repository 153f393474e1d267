/**
 * Runs an analysis (docs/promotion.md § Analysis): its metrics side by side, each measured at its own
 * cadence (the first after `initialDelay`, then every `interval`, `count` in all), each measurement judged
 * and handed to `onMeasurement` (the promotion logs, audits and counts it) as it is taken. A metric that
 * fails stops the whole run at once (the promotion aborts without waiting for the others); one that is
 * inconclusive stops itself, the others go on (a failure still wins).
 */
import {
  countMeasurement,
  decideMetric,
  decideRun,
  emptyTally,
  judgeMeasurement,
  type MeasurementOutcome,
  type MetricDecision,
  type QueryAnswer,
  type RunPhase,
} from './decide.js';
import { queryPrometheus } from './prometheus.js';
import type { Analysis, AnalysisMetric } from './spec.js';

/** baseline: before the flip, on the current phase; bake: after it, on the target's. */
export type AnalysisStage = 'baseline' | 'bake';

export interface Measurement {
  metric: string;
  stage: AnalysisStage;
  /** 1 for the first of the metric's measurements. */
  index: number;
  count: number;
  outcome: MeasurementOutcome;
  values?: number[];
  detail: string;
  at: string;
}

export interface AnalysisResult {
  status: RunPhase;
  /** The metric that decided (the first to fail, else the first inconclusive). */
  metric?: string;
  reason: string;
  measurements: Measurement[];
}

export interface RunAnalysisOptions {
  analysis: Analysis;
  stage: AnalysisStage;
  /** The environment's Prometheus (a metric's own `address` wins). */
  prometheusUrl: string;
  onMeasurement?: (measurement: Measurement) => Promise<void> | void;
  /** For tests: what a query answers, and how time passes. */
  query?: (address: string, query: string) => Promise<QueryAnswer>;
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
}

function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted || ms <= 0) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done);
  });
}

async function runMetric(
  metric: AnalysisMetric,
  options: RunAnalysisOptions,
  stop: AbortController,
  measurements: Measurement[],
): Promise<MetricDecision> {
  const sleep = options.sleep ?? abortableSleep;
  const query = options.query ?? queryPrometheus;
  const started = Date.now();
  let tally = emptyTally();
  let decision: MetricDecision = { phase: 'running', reason: 'not measured' };
  for (let i = 0; i < metric.count && !stop.signal.aborted; i++) {
    // A fixed cadence from the start: a slow query does not stretch the interval.
    const due = started + metric.initialDelayMs + i * metric.intervalMs;
    await sleep(due - Date.now(), stop.signal);
    if (stop.signal.aborted) break;
    const answer = await query(metric.address ?? options.prometheusUrl, metric.query);
    const judged = judgeMeasurement(metric, answer);
    const measurement: Measurement = {
      metric: metric.name,
      stage: options.stage,
      index: i + 1,
      count: metric.count,
      ...judged,
      ...('values' in answer ? { values: answer.values } : {}),
      at: new Date().toISOString(),
    };
    measurements.push(measurement);
    await options.onMeasurement?.(measurement);
    tally = countMeasurement(tally, judged.outcome);
    decision = decideMetric(metric, tally);
    if (decision.phase === 'failed') stop.abort();
    if (decision.phase !== 'running') break;
  }
  if (decision.phase === 'running' && stop.signal.aborted)
    decision = { phase: 'running', reason: 'stopped: another metric failed' };
  return decision;
}

export async function runAnalysis(options: RunAnalysisOptions): Promise<AnalysisResult> {
  const stop = new AbortController();
  const measurements: Measurement[] = [];
  const decisions = await Promise.all(
    options.analysis.metrics.map((metric) => runMetric(metric, options, stop, measurements)),
  );
  const status = decideRun(decisions.map((d) => d.phase));
  const deciding =
    decisions.findIndex((d) => d.phase === 'failed') >= 0
      ? decisions.findIndex((d) => d.phase === 'failed')
      : decisions.findIndex((d) => d.phase !== 'successful');
  if (status === 'successful')
    return { status, reason: `every metric successful (${decisions.length})`, measurements };
  const metric = options.analysis.metrics[deciding]!.name;
  return { status, metric, reason: `${metric}: ${decisions[deciding]!.reason}`, measurements };
}
