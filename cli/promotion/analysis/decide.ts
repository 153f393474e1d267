/**
 * The decisions of an analysis (docs/promotion.md § Analysis), pure: what one measurement says, what a
 * metric's measurements so far say, and what the run says. Argo Rollouts' rules, except one on purpose:
 * no evidence is never a pass. A query with no data (an empty vector, NaN) is an inconclusive measurement,
 * errors past `consecutiveErrorLimit` make the metric inconclusive (Argo: Error, which aborts; here a human
 * looks, since a Prometheus away says nothing about the release), and a metric whose measurements are all
 * done without one success is inconclusive, never successful.
 */
import type { AnalysisMetric } from './spec.js';

export type MeasurementOutcome = 'successful' | 'failed' | 'inconclusive' | 'error';

/** What a query gave: its values, or why it gave none. */
export type QueryAnswer = { values: number[] } | { error: string };

export interface Judged {
  outcome: MeasurementOutcome;
  detail: string;
}

/** One measurement: no data is inconclusive; a condition that cannot be evaluated is an error. */
export function judgeMeasurement(metric: AnalysisMetric, answer: QueryAnswer): Judged {
  if ('error' in answer) return { outcome: 'error', detail: answer.error };
  const { values } = answer;
  if (values.length === 0) return { outcome: 'inconclusive', detail: 'no data (the query returned nothing)' };
  if (values.some((value) => Number.isNaN(value)))
    return { outcome: 'inconclusive', detail: 'no data (the query returned NaN)' };
  const shown = `result ${values.length === 1 ? values[0] : `[${values.join(', ')}]`}`;
  try {
    // Argo's order: a failure condition that holds fails, whatever the success condition says.
    if (metric.failureCondition?.evaluate(values))
      return { outcome: 'failed', detail: `${shown}: ${metric.failureCondition.text}` };
    if (metric.successCondition) {
      if (metric.successCondition.evaluate(values))
        return { outcome: 'successful', detail: `${shown}: ${metric.successCondition.text}` };
      // With a failure condition too, neither holding is in between: inconclusive.
      return metric.failureCondition
        ? { outcome: 'inconclusive', detail: `${shown}: neither condition holds` }
        : { outcome: 'failed', detail: `${shown}: not ${metric.successCondition.text}` };
    }
    return { outcome: 'successful', detail: `${shown}: not ${metric.failureCondition!.text}` };
  } catch (error) {
    return { outcome: 'error', detail: `${shown}: ${(error as Error).message}` };
  }
}

export interface Tally {
  taken: number;
  successful: number;
  failed: number;
  inconclusive: number;
  error: number;
  consecutiveErrors: number;
}

export const emptyTally = (): Tally => ({
  taken: 0,
  successful: 0,
  failed: 0,
  inconclusive: 0,
  error: 0,
  consecutiveErrors: 0,
});

export function countMeasurement(tally: Tally, outcome: MeasurementOutcome): Tally {
  return {
    ...tally,
    taken: tally.taken + 1,
    [outcome]: tally[outcome] + 1,
    consecutiveErrors: outcome === 'error' ? tally.consecutiveErrors + 1 : 0,
  };
}

export type MetricPhase = 'running' | 'successful' | 'failed' | 'inconclusive';

export interface MetricDecision {
  phase: MetricPhase;
  reason: string;
}

/** What a metric's measurements so far decide. */
export function decideMetric(metric: AnalysisMetric, tally: Tally): MetricDecision {
  const counts = `${tally.successful} successful, ${tally.failed} failed, ${tally.inconclusive} inconclusive, ${tally.error} errors of ${tally.taken}`;
  if (tally.failed > metric.failureLimit)
    return {
      phase: 'failed',
      reason: `${tally.failed} failed, more than failureLimit ${metric.failureLimit} (${counts})`,
    };
  if (tally.consecutiveErrors > metric.consecutiveErrorLimit)
    return {
      phase: 'inconclusive',
      reason: `${tally.consecutiveErrors} measurements in a row errored, more than consecutiveErrorLimit ${metric.consecutiveErrorLimit}: no evidence is no pass (${counts})`,
    };
  if (tally.inconclusive > metric.inconclusiveLimit)
    return {
      phase: 'inconclusive',
      reason: `${tally.inconclusive} inconclusive, more than inconclusiveLimit ${metric.inconclusiveLimit} (${counts})`,
    };
  if (tally.taken < metric.count) return { phase: 'running', reason: counts };
  if (tally.successful === 0)
    return { phase: 'inconclusive', reason: `no successful measurement: no evidence is no pass (${counts})` };
  return { phase: 'successful', reason: counts };
}

export type RunPhase = 'successful' | 'failed' | 'inconclusive';

/** A run: failed if a metric failed, else inconclusive if one was, else successful. */
export function decideRun(phases: readonly MetricPhase[]): RunPhase {
  if (phases.includes('failed')) return 'failed';
  if (phases.includes('inconclusive') || phases.includes('running') || phases.length === 0)
    return 'inconclusive';
  return 'successful';
}
