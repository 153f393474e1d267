/**
 * Promotion of an environment (the local cluster or one of environments/*.json) from its phase to the next, and rollback, as a release
 * manager runs them (docs/design.md §5): check health, run the current phase's smoke checks, apply the target phase's
 * flag preset, wait until every node acts on it, run the target phase's checks, record it. A failure before
 * the flip changes nothing; a failure after it puts the previous preset back. Every step is recorded
 * (`smoke_runs`, `promotions`, the cluster audit chain).
 */
import { appendSerialized } from '../../broker/audit/audit.shared.js';
import { createPool, type Pool } from '../../broker/db/pool.js';
import { flagChangeLedger } from '../../broker/flag-changes.js';
import { pushRefreshOnce } from '../../broker/flag-refresh.js';
import { CLUSTER_CHAIN_ID, changeFlag } from '../../flags/changes.js';
import { FLAG_KEYS, type FlagValues, phasePreset } from '../../flags/registry.js';
import { UsageError } from '../args.js';
import { type Environment, NODE_TIMEOUT_MS } from '../environments/environment.js';
import { type CheckResult, type Expectations, runSmoke } from '../smoke/run.js';
import type { AnalysisResult, AnalysisStage, Measurement } from './analysis/run.js';
import type { Analysis } from './analysis/spec.js';
import {
  type AnalysisChoice,
  analysisInput,
  analysisMetrics,
  deletePause,
  type Pause,
  pausedLine,
  readPause,
  runStage,
  type StageContext,
  stageAnalysis,
  writePause,
} from './analysis/stage.js';
import { phaseExpectations } from './inputs.js';
import { acquirePromotionLock, type LockResult } from './lock.js';
import { type PromotionPlan, planOf } from './plan.js';

export interface PromotionOptions {
  environment: Environment;
  to: number;
  actor: string;
  /** Another environment that must have passed the target phase's checks first (staging before prod). */
  requirePassedIn?: string;
  /** The target phase's expectations (a file's or the phase folder's), read and checked before the run. */
  expectations: Expectations;
  /** Allow a promotion over more than one phase (audited). */
  allowSkip?: boolean;
  /** Take over a promotion lock older than PROMOTION_LOCK_STALE_MS (lock.ts). */
  forceUnlock?: boolean;
  /** Check and plan only: print the flag changes and checks, change nothing. */
  dryRun?: boolean;
  /** `--analysis`: run before the flip (baseline) and after it (bake); none without it. */
  analysis?: AnalysisChoice;
  /** The Prometheus the analysis asks (`--prometheus`, else the environment file's `prometheusUrl`). */
  prometheusUrl?: string;
  /** `--metrics-file`: the analysis's series, rewritten after each measurement. */
  metricsFile?: string;
  /** `--resume` / `--abort`: what a human decided about a paused promotion. */
  decision?: 'resume' | 'abort';
  /** Each analysis measurement as soon as it is taken. */
  onMeasurement?: (measurement: Measurement) => void;
  log: (line: string) => void;
  /** Each smoke check's result as soon as it is done: the phase's checks before the flip, the target's after. */
  onCheck?: (run: SmokeRun, result: CheckResult) => void;
}

/** One of a promotion's two smoke runs. */
export interface SmokeRun {
  phase: number;
  when: 'before' | 'after';
}

export interface PromotionOutcome {
  /**
   * blocked: nothing changed; rolled-back: flipped, a check failed, flipped back; rollback-failed: flipping
   * back failed too (a human must look); planned: a dry run's plan; rollback: `workbench rollback`;
   * paused: an analysis was inconclusive, a human decides (`--resume`, `--abort`).
   */
  status: 'promoted' | 'blocked' | 'rolled-back' | 'rollback-failed' | 'planned' | 'rollback' | 'paused';
  from: number;
  failedCheck?: string;
  reason?: string;
  plan?: PromotionPlan;
  /** The analysis stage that decided (failed or inconclusive), and its metric. */
  analysis?: { stage: AnalysisStage; status: AnalysisResult['status']; metric?: string; reason: string };
}

/**
 * The phase the environment was last promoted (or rolled back) to, else the cluster's own; while a
 * promotion is paused in its bake, the target's (its flags are on).
 */
export async function currentPhase(pool: Pool, environment: string, fallback: number): Promise<number> {
  const result = await pool.query<{ phase: number | null }>(
    `SELECT COALESCE(
       (SELECT CASE WHEN stage = 'bake' THEN to_phase ELSE from_phase END FROM promotion_pauses WHERE environment = $1),
       (SELECT CASE WHEN status = 'promoted' OR status = 'rollback' THEN to_phase ELSE from_phase END
          FROM promotions WHERE environment = $1 ORDER BY id DESC LIMIT 1)) AS phase`,
    [environment],
  );
  return result.rows[0]?.phase ?? fallback;
}

async function smoke(
  pool: Pool,
  environment: Environment,
  run: SmokeRun,
  expectations: Expectations,
  onCheck: PromotionOptions['onCheck'],
) {
  const { phase } = run;
  const results = await runSmoke(environment.target, expectations, undefined, (result) =>
    onCheck?.(run, result),
  );
  const passed = results.every((r) => r.met);
  await pool.query('INSERT INTO smoke_runs (environment, phase, passed, results) VALUES ($1, $2, $3, $4)', [
    environment.name,
    phase,
    passed,
    JSON.stringify(results),
  ]);
  return { passed, failed: results.find((r) => !r.met) };
}

/**
 * Writes a phase's preset at the environment's flag provider (each change audited once), pushes "refresh
 * now" to its nodes, and waits until every node acts on it.
 */
export async function applyPreset(
  pool: Pool,
  environment: Environment,
  values: FlagValues,
  actor: string,
): Promise<void> {
  const current = await environment.flags.read();
  for (const flag of FLAG_KEYS) {
    if (current[flag] === values[flag]) continue;
    await changeFlag(flagChangeLedger(pool), environment.flags, {
      environment: environment.name,
      flag,
      value: values[flag],
      actor,
    });
  }
  // Without a push (or with Redis away) the nodes' poll applies it.
  if (environment.push) await pushRefreshOnce(environment.push, environment.name, { preset: true });
  const deadline = Date.now() + 15_000;
  for (;;) {
    const acting = await Promise.all(
      environment.target.nodes.map(async (node) => {
        const report = (await (
          await fetch(`${node.url}/flags`, { signal: AbortSignal.timeout(NODE_TIMEOUT_MS) })
        ).json()) as {
          flags: Record<string, { acting: boolean }>;
        };
        return FLAG_KEYS.every((flag) => report.flags[flag]?.acting === values[flag]);
      }),
    ).catch(() => [false]);
    if (acting.every(Boolean)) return;
    if (Date.now() > deadline) throw new Error('not every node acts on the new flags after 15 s');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function record(
  pool: Pool,
  environment: Environment,
  from: number,
  to: number,
  outcome: PromotionOutcome,
  actor: string,
  audit: Record<string, unknown> = {},
) {
  await pool.query(
    'INSERT INTO promotions (environment, from_phase, to_phase, status, failed_check, actor) VALUES ($1, $2, $3, $4, $5, $6)',
    [environment.name, from, to, outcome.status, outcome.failedCheck ?? null, actor],
  );
  await appendSerialized(pool, CLUSTER_CHAIN_ID, [
    {
      meshId: CLUSTER_CHAIN_ID,
      eventType: `promotion.${outcome.status}`,
      actor,
      payload: {
        environment: environment.name,
        from,
        to,
        failedCheck: outcome.failedCheck,
        reason: outcome.reason,
        ...audit,
      },
    },
  ]);
}

/** An event on the environment's audit chain that is no outcome (paused, resumed, aborted). */
async function auditEvent(pool: Pool, eventType: string, actor: string, payload: Record<string, unknown>) {
  await appendSerialized(pool, CLUSTER_CHAIN_ID, [{ meshId: CLUSTER_CHAIN_ID, eventType, actor, payload }]);
}

async function healthProblem(environment: Environment): Promise<string | undefined> {
  for (const node of environment.target.nodes) {
    const ok = await fetch(`${node.url}/health`, { signal: AbortSignal.timeout(NODE_TIMEOUT_MS) }).then(
      (r) => r.ok,
      () => false,
    );
    if (!ok) return `${node.id} is not healthy`;
  }
  return undefined;
}

/** What a promotion's steps share once its lock is held. */
interface Run {
  pool: Pool;
  options: PromotionOptions;
  from: number;
  lock: Extract<LockResult, { held: true }>;
  block: (
    reason: string,
    failedCheck?: string,
    extra?: Partial<PromotionOutcome>,
  ) => Promise<PromotionOutcome>;
  audit: Record<string, unknown>;
  /** With an analysis: what its stages share (the Prometheus, the series). */
  stages?: StageContext;
}

export async function promote(options: PromotionOptions): Promise<PromotionOutcome> {
  const { environment, to, actor } = options;
  const pool = createPool(environment.target.databaseUrl, { max: 2, applicationName: 'workbench-promote' });
  let lock: LockResult | undefined;
  try {
    lock = await acquirePromotionLock(
      environment.target.databaseUrl,
      environment.name,
      actor,
      options.forceUnlock,
    );
    const from = await currentPhase(pool, environment.name, environment.phase);
    // Not recorded: the last promotions row says the current phase, and only the lock's holder may write it
    // (a refusal written just after the holder's outcome would put the old phase back on top).
    if (!lock.held) return { status: 'blocked', from, reason: lock.reason };
    const run = startRun(pool, options, from, lock);
    const pause = await readPause(pool, environment.name);
    if (options.decision) return await decidePause(run, pause);
    // A paused promotion holds the environment as the lock does (only --resume or --abort moves it on).
    if (pause) return { status: 'blocked', from, reason: pausedLine(pause) };
    if (lock.forced) options.log(`--force-unlock: took the stale lock of ${lock.forced.holder}`);
    const refusal = await preflight(pool, options, from);
    if (refusal) return await run.block(refusal);
    // The current phase's expectations (and analysis), read before anything changes as the target's were (exit 2 if bad).
    const fromExpectations = phaseExpectations(from);
    const baseline = options.analysis && stageAnalysis(options.analysis, from);
    const bake = options.analysis && stageAnalysis(options.analysis, to);
    if (options.dryRun)
      return {
        status: 'planned',
        from,
        plan: await planOf(environment, from, to, fromExpectations, options.expectations, {
          baseline,
          bake,
          prometheusUrl: options.prometheusUrl,
        }),
      };
    if (baseline && run.stages) {
      const result = await runStage(run.stages, 'baseline', baseline);
      if (result.status !== 'successful')
        return await stageStopped(run, 'baseline', result, undefined, {
          baseline: baseline.path,
          bake: bake!.path,
        });
    }
    return await flipWithSmoke(run, fromExpectations, bake);
  } finally {
    if (lock?.held) await lock.release();
    await pool.end();
  }
}

/** The run's shared parts: its refusal (recorded, audited) and, with an analysis, its stages' context. */
function startRun(
  pool: Pool,
  options: PromotionOptions,
  from: number,
  lock: Extract<LockResult, { held: true }>,
): Run {
  const { environment, to, actor } = options;
  const audit = {
    ...(options.allowSkip && Math.abs(to - from) > 1 ? { allowSkip: true } : {}),
    ...(lock.forced ? { forcedUnlock: lock.forced.holder } : {}),
  };
  const block = async (reason: string, failedCheck?: string, extra: Partial<PromotionOutcome> = {}) => {
    const outcome: PromotionOutcome = {
      status: 'blocked',
      from,
      reason,
      ...(failedCheck ? { failedCheck } : {}),
      ...extra,
    };
    // A dry run changes nothing, not even the record of its refusal.
    if (!options.dryRun)
      await record(pool, environment, from, to, outcome, actor, {
        ...audit,
        ...(extra.analysis ? { analysis: extra.analysis } : {}),
      }).catch((error) => options.log(`could not record the refusal: ${(error as Error).message}`));
    return outcome;
  };
  const stages: StageContext | undefined =
    options.prometheusUrl === undefined
      ? undefined
      : {
          pool,
          environment: environment.name,
          actor,
          from,
          to,
          prometheusUrl: options.prometheusUrl,
          metrics: analysisMetrics(environment.name, options.metricsFile),
          log: options.log,
          onMeasurement: options.onMeasurement,
        };
  return { pool, options, from, lock, block, audit, ...(stages ? { stages } : {}) };
}

/**
 * A stage that was not successful: failed before the flip, blocked (nothing changed; a failed bake is
 * the caller's to roll back); inconclusive, paused, the pause kept in Postgres for --resume or --abort.
 */
async function stageStopped(
  run: Run,
  stage: AnalysisStage,
  result: AnalysisResult,
  previous: FlagValues | undefined,
  analysisFiles: { baseline: string; bake: string },
): Promise<PromotionOutcome> {
  const { pool, options, from } = run;
  const { environment, to, actor, log } = options;
  const analysis = { stage, status: result.status, metric: result.metric, reason: result.reason };
  if (result.status === 'failed' && stage === 'baseline')
    return await run.block(`baseline analysis failed: ${result.reason}`, undefined, { analysis });
  await writePause(pool, {
    environment: environment.name,
    fromPhase: from,
    toPhase: to,
    stage,
    metric: result.metric ?? '',
    reason: result.reason,
    previousFlags: previous ?? (await environment.flags.read()),
    analysisFiles,
    actor,
  });
  await auditEvent(pool, 'promotion.paused', actor, {
    environment: environment.name,
    from,
    to,
    ...run.audit,
    analysis,
  });
  log(`paused: the ${stage} analysis is inconclusive; a human decides: promote --resume or --abort`);
  const changed = stage === 'bake' ? `the flags are phase ${to}'s` : 'nothing changed';
  return {
    status: 'paused',
    from,
    reason: `${stage} analysis inconclusive (${changed}): ${result.reason}`,
    analysis,
  };
}

/** `--resume` / `--abort` of a paused promotion (under the lock, as every promotion). */
async function decidePause(run: Run, pause: Pause | undefined): Promise<PromotionOutcome> {
  const { pool, options } = run;
  const { environment, actor, decision, log } = options;
  if (!pause) throw new UsageError(`--${decision}: no paused promotion of ${environment.name}`);
  if (pause.toPhase !== options.to)
    throw new UsageError(
      `--${decision}: the paused promotion of ${environment.name} is to phase ${pause.toPhase}, not ${options.to}`,
    );
  const from = pause.fromPhase;
  const payload = {
    environment: environment.name,
    from,
    to: pause.toPhase,
    stage: pause.stage,
    metric: pause.metric,
    pausedBy: pause.actor,
    pausedAt: pause.createdAt,
    reason: pause.reason,
  };
  await auditEvent(pool, decision === 'resume' ? 'promotion.resumed' : 'promotion.aborted', actor, payload);
  await deletePause(pool, environment.name);
  log(
    `${decision === 'resume' ? 'resuming' : 'aborting'} the promotion paused at its ${pause.stage} analysis (${pause.metric})`,
  );
  if (pause.stage === 'baseline') {
    if (decision === 'abort')
      return await run.block(`aborted by ${actor} at the baseline pause (${pause.metric})`);
    // The rest of the promotion: its baseline taken as looked at, the bake as the pause's file says.
    const bakePath = options.analysis?.kind === 'file' ? options.analysis.path : pause.analysisFiles.bake;
    const bake = { path: bakePath, analysis: analysisInput(bakePath, `--${decision}: the bake analysis`) };
    return await flipWithSmoke(run, phaseExpectations(from), run.stages ? bake : undefined);
  }
  const outcome =
    decision === 'resume'
      ? ({ status: 'promoted', from } as const)
      : await putBack(pool, environment, pause.previousFlags, actor, from, {
          reason: `aborted by ${actor} at the bake pause (${pause.metric})`,
        });
  await record(pool, environment, from, pause.toPhase, outcome, actor, { ...run.audit, decided: decision });
  return outcome;
}

/** What refuses a promotion before any change (a skipped phase, a node down, the policy), or undefined. */
async function preflight(pool: Pool, options: PromotionOptions, from: number): Promise<string | undefined> {
  const { environment, to } = options;
  if (to === from) return `already at phase ${to}`;
  if (Math.abs(to - from) > 1 && !options.allowSkip)
    return `phase ${from} to ${to} skips a phase: promote one phase at a time, or give --allow-skip (audited)`;
  if (Math.abs(to - from) > 1) options.log(`--allow-skip: going from phase ${from} straight to phase ${to}`);
  const unhealthy = await healthProblem(environment);
  if (unhealthy) return unhealthy;
  const requirePassedIn = options.requirePassedIn ?? environment.requirePassedIn;
  if (requirePassedIn) {
    const passed = await pool.query(
      'SELECT 1 FROM smoke_runs WHERE environment = $1 AND phase = $2 AND passed LIMIT 1',
      [requirePassedIn, to],
    );
    if (passed.rowCount === 0) return `policy: phase ${to} has not passed in ${requirePassedIn} yet`;
  }
  return undefined;
}

/**
 * The current phase's checks, the flip, the target's checks and the bake; from the flip on, any failure
 * puts the previous flags back (rolled-back), and a failure of that is rollback-failed: the page for a human.
 */
async function flipWithSmoke(
  run: Run,
  fromExpectations: Expectations,
  bake: { path: string; analysis: Analysis } | undefined,
): Promise<PromotionOutcome> {
  const { pool, options, from, lock, block } = run;
  const { environment, to, actor, log } = options;
  let previous: FlagValues;
  try {
    log(`checking phase ${from} before the flip`);
    const before = await smoke(
      pool,
      environment,
      { phase: from, when: 'before' },
      fromExpectations,
      options.onCheck,
    );
    if (!before.passed) return await block(`phase ${from} checks do not hold`, before.failed?.name);
    // Another promotion may have ended this one's lock connection (--force-unlock): never flip without it.
    if (lock.lost()) return await block('the promotion lock was lost (its connection ended)');
    previous = await environment.flags.read();
  } catch (error) {
    // Nothing has changed yet: an error here blocks.
    return await block(`before the flip: ${(error as Error).message}`);
  }
  let failure: { failedCheck?: string; reason: string; analysis?: PromotionOutcome['analysis'] } | undefined;
  try {
    log(`applying the phase ${to} flag preset and waiting for every node`);
    await applyPreset(pool, environment, phasePreset(to), actor);
    log(`checking phase ${to} after the flip`);
    const after = await smoke(
      pool,
      environment,
      { phase: to, when: 'after' },
      options.expectations,
      options.onCheck,
    );
    if (!after.passed)
      failure = {
        failedCheck: after.failed?.name,
        reason: after.failed?.detail || `${after.failed?.name} did not meet its expectation`,
      };
    else if (bake && run.stages) {
      const result = await runStage(run.stages, 'bake', bake);
      if (result.status === 'inconclusive')
        return await stageStopped(run, 'bake', result, previous, { baseline: '', bake: bake.path });
      if (result.status === 'failed')
        failure = {
          reason: `bake analysis failed: ${result.reason}`,
          analysis: { stage: 'bake', status: result.status, metric: result.metric, reason: result.reason },
        };
    }
  } catch (error) {
    failure = { reason: (error as Error).message };
  }
  let outcome: PromotionOutcome = { status: 'promoted', from };
  if (failure) {
    log(
      `${failure.failedCheck ? `check ${failure.failedCheck} failed` : failure.reason}: putting the phase ${from} flags back`,
    );
    outcome = await putBack(pool, environment, previous, actor, from, failure);
  }
  await record(pool, environment, from, to, outcome, actor, {
    ...run.audit,
    ...(outcome.analysis ? { analysis: outcome.analysis } : {}),
  }).catch((error) => {
    // The outcome stands (the flags are what it says); only its record is missing, and is said so.
    log(`could not record the outcome: ${(error as Error).message}`);
  });
  return outcome;
}

/** Puts the previous flags back after a failure from the flip on: rolled-back, or rollback-failed. */
export async function putBack(
  pool: Pool,
  environment: Environment,
  previous: FlagValues,
  actor: string,
  from: number,
  failure: { failedCheck?: string; reason: string },
): Promise<PromotionOutcome> {
  try {
    await applyPreset(pool, environment, previous, actor);
    return { status: 'rolled-back', from, ...failure };
  } catch (error) {
    return {
      status: 'rollback-failed',
      from,
      ...failure,
      reason: `${failure.reason}; putting the phase ${from} flags back failed too: ${(error as Error).message}`,
    };
  }
}

/** Back to the phase before the last promotion (its flag preset), recorded as a rollback. */
export async function rollback(environment: Environment, actor: string, log: (line: string) => void) {
  const pool = createPool(environment.target.databaseUrl, { max: 2, applicationName: 'workbench-rollback' });
  // The promotion lock: a rollback does not interleave with a promotion of the same environment.
  const lock = await acquirePromotionLock(environment.target.databaseUrl, environment.name, actor).catch(
    async (error) => {
      await pool.end();
      throw error;
    },
  );
  try {
    if (!lock.held) throw new Error(lock.reason);
    const pause = await readPause(pool, environment.name);
    if (pause) throw new Error(pausedLine(pause));
    const last = (
      await pool.query<{ fromPhase: number; toPhase: number }>(
        `SELECT from_phase AS "fromPhase", to_phase AS "toPhase" FROM promotions
          WHERE environment = $1 AND status = 'promoted' ORDER BY id DESC LIMIT 1`,
        [environment.name],
      )
    ).rows[0];
    if (!last) throw new Error(`no promotion of ${environment.name} to roll back`);
    log(`rolling ${environment.name} back from phase ${last.toPhase} to phase ${last.fromPhase}`);
    await applyPreset(pool, environment, phasePreset(last.fromPhase), actor);
    await record(
      pool,
      environment,
      last.toPhase,
      last.fromPhase,
      { status: 'rollback', from: last.toPhase },
      actor,
    );
    return last;
  } finally {
    if (lock.held) await lock.release();
    await pool.end();
  }
}

export type { CheckResult };
