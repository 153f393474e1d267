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
import { type Environment, NODE_TIMEOUT_MS } from '../environments/environment.js';
import { type CheckResult, type Expectations, runSmoke } from '../smoke/run.js';
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
   * back failed too (a human must look); planned: a dry run's plan; rollback: `workbench rollback`.
   */
  status: 'promoted' | 'blocked' | 'rolled-back' | 'rollback-failed' | 'planned' | 'rollback';
  from: number;
  failedCheck?: string;
  reason?: string;
  plan?: PromotionPlan;
}

/** The phase the environment was last promoted (or rolled back) to, else the cluster's own. */
export async function currentPhase(pool: Pool, environment: string, fallback: number): Promise<number> {
  const result = await pool.query<{ phase: number }>(
    `SELECT CASE WHEN status = 'promoted' OR status = 'rollback' THEN to_phase ELSE from_phase END AS phase
       FROM promotions WHERE environment = $1 ORDER BY id DESC LIMIT 1`,
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
    const audit = {
      ...(options.allowSkip && Math.abs(to - from) > 1 ? { allowSkip: true } : {}),
      ...(lock.forced ? { forcedUnlock: lock.forced.holder } : {}),
    };
    const block = async (reason: string, failedCheck?: string): Promise<PromotionOutcome> => {
      const outcome: PromotionOutcome = {
        status: 'blocked',
        from,
        reason,
        ...(failedCheck ? { failedCheck } : {}),
      };
      // A dry run changes nothing, not even the record of its refusal.
      if (!options.dryRun)
        await record(pool, environment, from, to, outcome, actor, audit).catch((error) =>
          options.log(`could not record the refusal: ${(error as Error).message}`),
        );
      return outcome;
    };
    if (lock.forced) options.log(`--force-unlock: took the stale lock of ${lock.forced.holder}`);
    const refusal = await preflight(pool, options, from);
    if (refusal) return await block(refusal);
    // The current phase's expectations, read before anything changes as the target's were (exit 2 if bad).
    const fromExpectations = phaseExpectations(from);
    if (options.dryRun)
      return {
        status: 'planned',
        from,
        plan: await planOf(environment, from, to, fromExpectations, options.expectations),
      };
    return await flipWithSmoke(pool, options, from, fromExpectations, lock, block, audit);
  } finally {
    if (lock?.held) await lock.release();
    await pool.end();
  }
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
 * The current phase's checks, the flip, the target's checks; from the flip on, any failure puts the
 * previous flags back (rolled-back), and a failure of that is rollback-failed: the page for a human.
 */
async function flipWithSmoke(
  pool: Pool,
  options: PromotionOptions,
  from: number,
  fromExpectations: Expectations,
  lock: Extract<LockResult, { held: true }>,
  block: (reason: string, failedCheck?: string) => Promise<PromotionOutcome>,
  audit: Record<string, unknown>,
): Promise<PromotionOutcome> {
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
  let failure: { failedCheck?: string; reason: string } | undefined;
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
  await record(pool, environment, from, to, outcome, actor, audit).catch((error) => {
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
