/**
 * The promotion's side of an analysis (docs/promotion.md § Analysis): the two stages it runs (baseline
 * before the flip, bake after it), each measurement logged, counted and appended to the environment's
 * audit chain as it is taken; and the pause an inconclusive stage leaves in Postgres (`promotion_pauses`)
 * for `promote --resume` or `--abort`.
 */
import { join } from 'node:path';
import { appendSerialized } from '../../../broker/audit/audit.shared.js';
import type { Pool } from '../../../broker/db/pool.js';
import { packageRoot } from '../../../broker/paths.js';
import { CLUSTER_CHAIN_ID } from '../../../flags/changes.js';
import type { FlagValues } from '../../../flags/registry.js';
import { UsageError } from '../../args.js';
import { AnalysisMetrics } from './metrics.js';
import { type AnalysisResult, type AnalysisStage, type Measurement, runAnalysis } from './run.js';
import { type Analysis, AnalysisFileError, metricSpanMs, readAnalysisFile } from './spec.js';

/** `--analysis FILE` (both stages) or `--analysis default` (each phase's own `phases/phaseN/analysis.yaml`). */
export type AnalysisChoice = { kind: 'file'; path: string; analysis: Analysis } | { kind: 'default' };

export function phaseAnalysisPath(phase: number): string {
  return join(packageRoot(), 'phases', `phase${phase}`, 'analysis.yaml');
}

/** Reads an analysis file as an input: a bad one is a UsageError naming `label` and the field (exit 2). */
export function analysisInput(path: string, label: string): Analysis {
  try {
    return readAnalysisFile(path);
  } catch (error) {
    if (error instanceof AnalysisFileError) throw new UsageError(`${label}: ${error.message}`);
    throw error;
  }
}

/** The analysis a stage runs: the file given, or the phase's own (before the flip: the current phase's). */
export function stageAnalysis(choice: AnalysisChoice, phase: number): { path: string; analysis: Analysis } {
  if (choice.kind === 'file') return { path: choice.path, analysis: choice.analysis };
  const path = phaseAnalysisPath(phase);
  return { path, analysis: analysisInput(path, `phase ${phase} analysis`) };
}

/** One line per metric, for the dry run's plan and the log. */
export function describeAnalysis(analysis: Analysis): string {
  return analysis.metrics
    .map(
      (m) =>
        `${m.name} (${m.count} × ${m.intervalMs / 1000} s${m.initialDelayMs ? ` after ${m.initialDelayMs / 1000} s` : ''}, about ${Math.round(metricSpanMs(m) / 1000)} s)`,
    )
    .join(', ');
}

export interface StageContext {
  pool: Pool;
  environment: string;
  actor: string;
  from: number;
  to: number;
  prometheusUrl: string;
  metrics: AnalysisMetrics;
  log: (line: string) => void;
  onMeasurement?: (measurement: Measurement) => void;
}

export function analysisMetrics(environment: string, file: string | undefined): AnalysisMetrics {
  return new AnalysisMetrics(environment, file);
}

/** Runs one stage: every measurement logged, counted and audited (`promotion.analysis.measurement`). */
export async function runStage(
  context: StageContext,
  stage: AnalysisStage,
  source: { path: string; analysis: Analysis },
): Promise<AnalysisResult> {
  const { pool, environment, actor, log } = context;
  log(`${stage} analysis (${source.path}): ${describeAnalysis(source.analysis)}`);
  const result = await runAnalysis({
    analysis: source.analysis,
    stage,
    prometheusUrl: context.prometheusUrl,
    onMeasurement: async (measurement) => {
      log(
        `${stage} ${measurement.metric} ${measurement.index}/${measurement.count}: ${measurement.outcome} (${measurement.detail})`,
      );
      context.onMeasurement?.(measurement);
      await context.metrics.record(measurement).catch((error) => {
        log(`could not write the analysis metrics: ${(error as Error).message}`);
      });
      await appendSerialized(pool, CLUSTER_CHAIN_ID, [
        {
          meshId: CLUSTER_CHAIN_ID,
          eventType: 'promotion.analysis.measurement',
          actor,
          payload: { environment, from: context.from, to: context.to, ...measurement },
        },
      ]);
    },
  });
  log(`${stage} analysis ${result.status}: ${result.reason}`);
  return result;
}

export interface Pause {
  environment: string;
  fromPhase: number;
  toPhase: number;
  stage: AnalysisStage;
  metric: string;
  reason: string;
  previousFlags: FlagValues;
  analysisFiles: { baseline: string; bake: string };
  actor: string;
  createdAt: Date;
}

export async function readPause(pool: Pool, environment: string): Promise<Pause | undefined> {
  const result = await pool.query<Pause>(
    `SELECT environment, from_phase AS "fromPhase", to_phase AS "toPhase", stage, metric, reason,
            previous_flags AS "previousFlags", analysis_files AS "analysisFiles", actor, created_at AS "createdAt"
       FROM promotion_pauses WHERE environment = $1`,
    [environment],
  );
  return result.rows[0];
}

export async function writePause(pool: Pool, pause: Omit<Pause, 'createdAt'>): Promise<void> {
  await pool.query(
    `INSERT INTO promotion_pauses (environment, from_phase, to_phase, stage, metric, reason, previous_flags, analysis_files, actor)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      pause.environment,
      pause.fromPhase,
      pause.toPhase,
      pause.stage,
      pause.metric,
      pause.reason,
      JSON.stringify(pause.previousFlags),
      JSON.stringify(pause.analysisFiles),
      pause.actor,
    ],
  );
}

export async function deletePause(pool: Pool, environment: string): Promise<void> {
  await pool.query('DELETE FROM promotion_pauses WHERE environment = $1', [environment]);
}

/** What refuses anything but --resume / --abort while a promotion is paused. */
export function pausedLine(pause: Pause): string {
  return `the promotion of ${pause.environment} from phase ${pause.fromPhase} to ${pause.toPhase} is paused (${pause.stage} analysis inconclusive: ${pause.reason}; since ${pause.createdAt.toISOString()}, by ${pause.actor}): look, then promote --resume or --abort`;
}
