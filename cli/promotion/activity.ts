/**
 * What is going on with an environment's promotions, read from where the promotion already records it
 * (docs/promotion.md § Promotion activity), for the console and `workbench status`. No table of its own:
 *
 * - the promotion lock: Postgres's own view of the advisory lock (lock.ts `lockHolder`): its holder, since
 *   when, and whether it is stale (older than PROMOTION_LOCK_STALE_MS: `--force-unlock` may take it);
 * - a paused promotion: its `promotion_pauses` row (stage.ts `readPause`);
 * - the current or last analysis: its `promotion.analysis.measurement` entries on the cluster audit chain,
 *   which every measurement is appended to as it is taken, and the events around them that say how each
 *   stage ended (`promotion.paused|resumed|aborted` and the outcome, whose `analysis` names the stage that
 *   decided).
 *
 * Bounded: the newest ACTIVITY_EVENTS `promotion.*` events of the environment are read (a run of 6 metrics
 * measured 4 times in both stages is 48 measurements), the payloads' values cut to MAX_VALUES.
 */
import type { Pool } from '../../broker/db/pool.js';
import { CLUSTER_CHAIN_ID } from '../../flags/changes.js';
import type { MeasurementOutcome } from './analysis/decide.js';
import type { AnalysisStage } from './analysis/run.js';
import { readPause } from './analysis/stage.js';
import { lockHolder, PROMOTION_LOCK_STALE_MS } from './lock.js';

export const ACTIVITY_EVENTS = 500;
const MAX_VALUES = 8;

export interface LockView {
  /** The lock connection's application_name: `workbench-promote ACTOR@HOST:PID`. */
  holder: string;
  /** Null when this role may not see the holder's connection start (it lacks pg_read_all_stats). */
  since: string | null;
  ageMs: number | null;
  /** Older than PROMOTION_LOCK_STALE_MS: `promote --force-unlock` may end it and take the lock. */
  stale: boolean;
}

export interface PauseView {
  fromPhase: number;
  toPhase: number;
  stage: AnalysisStage;
  metric: string;
  reason: string;
  actor: string;
  since: string;
}

export interface MeasurementView {
  index: number;
  count: number;
  at: string;
  outcome: MeasurementOutcome;
  /** The query's first value, null without one (no data, an error). */
  value: number | null;
  values: number[];
  detail: string;
}

export interface MetricSeries {
  stage: AnalysisStage;
  metric: string;
  /** Oldest first. */
  measurements: MeasurementView[];
}

/**
 * How a stage ended: as its deciding event says (failed, inconclusive), successful when the promotion went
 * on past it, running while the lock is held and nothing said so yet, unfinished when nothing ever did (the
 * promotion was killed mid-stage).
 */
export type StageVerdict = 'successful' | 'failed' | 'inconclusive' | 'running' | 'unfinished';

export interface StageView {
  stage: AnalysisStage;
  verdict: StageVerdict;
  /** The metric that decided, and why (a failed or inconclusive stage). */
  metric?: string;
  reason?: string;
  /** What a human decided at its pause. */
  decided?: 'resumed' | 'aborted';
}

export interface AnalysisView {
  fromPhase: number;
  toPhase: number;
  actor: string | null;
  startedAt: string;
  /** The promotion's outcome (`promoted`, `blocked`, `rolled-back`, …), `paused`, `running` or `unfinished`. */
  outcome: string;
  /** Why it ended so, as its outcome event says (a failed check, a failed bake, an abort). */
  reason?: string;
  /** The phase it is in or ended in: the last stage measured. */
  phase: AnalysisStage;
  stages: StageView[];
  /** Per stage and metric, in the order first measured. */
  metrics: MetricSeries[];
}

export interface PromotionActivity {
  environment: string;
  lock: LockView | null;
  pause: PauseView | null;
  /** The current or last promotion's analysis; null when no promotion of the environment ran one. */
  analysis: AnalysisView | null;
}

interface EventRow {
  id: string;
  eventType: string;
  actor: string | null;
  payload: Record<string, unknown>;
  at: Date;
}

/** Outcome events: a promotion ended (paused, resumed: the same promotion goes on). */
const ENDS = new Set([
  'promotion.promoted',
  'promotion.blocked',
  'promotion.rolled-back',
  'promotion.rollback-failed',
  'promotion.rollback',
]);
const MEASUREMENT = 'promotion.analysis.measurement';

export async function readPromotionActivity(
  pool: Pool,
  environment: string,
  now = Date.now(),
): Promise<PromotionActivity> {
  const [holder, pause, events] = await Promise.all([
    lockHolder(pool, environment),
    readPause(pool, environment),
    pool.query<EventRow>(
      `SELECT id::text AS id, event_type AS "eventType", actor, payload, created_at AS at FROM audit_log
        WHERE mesh_id = $1 AND event_type LIKE 'promotion.%' AND payload->>'environment' = $2
        ORDER BY id DESC LIMIT $3`,
      [CLUSTER_CHAIN_ID, environment, ACTIVITY_EVENTS],
    ),
  ]);
  // backend_start is null to a role that may not read other roles' statistics (pg_read_all_stats).
  const since = (holder?.since as Date | null | undefined) ?? null;
  const lock: LockView | null = holder
    ? {
        holder: holder.holder,
        since: since?.toISOString() ?? null,
        ageMs: since ? now - since.getTime() : null,
        stale: since ? now - since.getTime() >= PROMOTION_LOCK_STALE_MS : false,
      }
    : null;
  return {
    environment,
    lock,
    pause: pause
      ? {
          fromPhase: pause.fromPhase,
          toPhase: pause.toPhase,
          stage: pause.stage,
          metric: pause.metric,
          reason: pause.reason,
          actor: pause.actor,
          since: pause.createdAt.toISOString(),
        }
      : null,
    analysis: lastAnalysis(events.rows.reverse(), lock !== null),
  };
}

/**
 * The last run with measurements among `events` (oldest first): from the event after the outcome that ended
 * the run before it, to its own outcome (or to now, while it runs).
 */
export function lastAnalysis(events: EventRow[], lockHeld: boolean): AnalysisView | null {
  const last = events.findLastIndex((e) => e.eventType === MEASUREMENT);
  if (last < 0) return null;
  let first = last;
  while (first > 0 && !ENDS.has(events[first - 1]!.eventType)) first--;
  let end = events.findIndex((e, i) => i > last && ENDS.has(e.eventType));
  if (end < 0) end = events.length - 1;
  const run = events.slice(first, end + 1);
  const measured = run.filter((e) => e.eventType === MEASUREMENT);
  const ending = run.at(-1)!;
  const ended = ENDS.has(ending.eventType);
  const paused = !ended && run.findLast((e) => e.eventType !== MEASUREMENT)?.eventType === 'promotion.paused';

  const metrics: MetricSeries[] = [];
  for (const event of measured) {
    const p = event.payload;
    const stage = p.stage as AnalysisStage;
    const metric = String(p.metric);
    let series = metrics.find((m) => m.stage === stage && m.metric === metric);
    if (!series) {
      series = { stage, metric, measurements: [] };
      metrics.push(series);
    }
    const values = Array.isArray(p.values) ? (p.values as number[]).slice(0, MAX_VALUES) : [];
    series.measurements.push({
      index: Number(p.index),
      count: Number(p.count),
      at: typeof p.at === 'string' ? p.at : event.at.toISOString(),
      outcome: p.outcome as MeasurementOutcome,
      value: typeof values[0] === 'number' ? values[0] : null,
      values,
      detail: String(p.detail ?? ''),
    });
  }

  const stagesMeasured = [...new Set(metrics.map((m) => m.stage))];
  const stages: StageView[] = stagesMeasured.map((stage, i) => {
    const afterStage = run.slice(
      run.findLastIndex((e) => e.eventType === MEASUREMENT && e.payload.stage === stage) + 1,
    );
    const deciding = afterStage.find(
      (e) => (e.payload.analysis as { stage?: string } | undefined)?.stage === stage,
    );
    const decision = afterStage.find(
      (e) =>
        (e.eventType === 'promotion.resumed' || e.eventType === 'promotion.aborted') &&
        e.payload.stage === stage,
    );
    const view: StageView = { stage, verdict: 'running' };
    if (deciding) {
      const analysis = deciding.payload.analysis as { status: StageVerdict; metric?: string; reason: string };
      Object.assign(view, { verdict: analysis.status, metric: analysis.metric, reason: analysis.reason });
    } else if (i < stagesMeasured.length - 1 || ended) view.verdict = 'successful';
    else if (!lockHeld) view.verdict = 'unfinished';
    if (decision) view.decided = decision.eventType === 'promotion.resumed' ? 'resumed' : 'aborted';
    return view;
  });

  const head = measured[0]!;
  return {
    fromPhase: Number(head.payload.from),
    toPhase: Number(head.payload.to),
    actor: head.actor,
    startedAt: head.at.toISOString(),
    outcome: ended
      ? ending.eventType.slice('promotion.'.length)
      : paused
        ? 'paused'
        : lockHeld
          ? 'running'
          : 'unfinished',
    ...(ended && typeof ending.payload.reason === 'string' ? { reason: ending.payload.reason } : {}),
    phase: stagesMeasured.at(-1)!,
    stages,
    metrics,
  };
}

/** A measurement as text: its outcome and its value. */
export function measurementText(m: MeasurementView): string {
  return m.value === null ? m.outcome : `${m.outcome} ${Number(m.value.toPrecision(4))}`;
}
