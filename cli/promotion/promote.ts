/**
 * Promotion of an environment (the local cluster or one of environments/*.json) from its phase to the next, and rollback, as a release
 * manager runs them (docs/design.md §5): check health, run the current phase's smoke checks, apply the target phase's
 * flag preset, wait until every node acts on it, run the target phase's checks, record it. A failure before
 * the flip changes nothing; a failure after it puts the previous preset back. Every step is recorded
 * (`smoke_runs`, `promotions`, the cluster audit chain).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { appendSerialized } from '../../broker/audit/audit.shared.js';
import { createPool, type Pool } from '../../broker/db/pool.js';
import { flagChangeLedger } from '../../broker/flag-changes.js';
import { pushRefreshOnce } from '../../broker/flag-refresh.js';
import { packageRoot } from '../../broker/paths.js';
import { CLUSTER_CHAIN_ID, changeFlag } from '../../flags/changes.js';
import { FLAG_KEYS, type FlagValues, phasePreset } from '../../flags/registry.js';
import { type Environment, NODE_TIMEOUT_MS } from '../environments/environment.js';
import { type CheckResult, type Expectations, runSmoke } from '../smoke/run.js';

export interface PromotionOptions {
  environment: Environment;
  to: number;
  actor: string;
  /** Another environment that must have passed the target phase's checks first (staging before prod). */
  requirePassedIn?: string;
  /** The target phase's expectations, when not the phase folder's. */
  expectationsFile?: string;
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
  /** blocked: nothing changed; rolled-back: flipped, a check failed, flipped back; rollback: `workbench rollback`. */
  status: 'promoted' | 'blocked' | 'rolled-back' | 'rollback';
  from: number;
  failedCheck?: string;
  reason?: string;
}

function expectationsOf(phase: number, file?: string): Expectations {
  const path = file ?? join(packageRoot(), 'phases', `phase${phase}`, 'expectations.json');
  return JSON.parse(readFileSync(path, 'utf8')) as Expectations;
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
async function applyPreset(
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
  const { environment, to, actor, log } = options;
  const pool = createPool(environment.target.databaseUrl, { max: 2, applicationName: 'workbench-promote' });
  try {
    const from = await currentPhase(pool, environment.name, environment.phase);
    const block = async (reason: string, failedCheck?: string): Promise<PromotionOutcome> => {
      const outcome: PromotionOutcome = {
        status: 'blocked',
        from,
        reason,
        ...(failedCheck ? { failedCheck } : {}),
      };
      await record(pool, environment, from, to, outcome, actor);
      return outcome;
    };
    if (to === from) return await block(`already at phase ${to}`);
    const unhealthy = await healthProblem(environment);
    if (unhealthy) return await block(unhealthy);
    const requirePassedIn = options.requirePassedIn ?? environment.requirePassedIn;
    if (requirePassedIn) {
      const passed = await pool.query(
        'SELECT 1 FROM smoke_runs WHERE environment = $1 AND phase = $2 AND passed LIMIT 1',
        [requirePassedIn, to],
      );
      if (passed.rowCount === 0)
        return await block(`policy: phase ${to} has not passed in ${requirePassedIn} yet`);
    }
    log(`checking phase ${from} before the flip`);
    const before = await smoke(
      pool,
      environment,
      { phase: from, when: 'before' },
      expectationsOf(from),
      options.onCheck,
    );
    if (!before.passed) return await block(`phase ${from} checks do not hold`, before.failed?.name);

    const previous = await environment.flags.read();
    // From the flip on, any failure (a check, nodes not acting on the preset in time, an error) puts the
    // previous flags back and is recorded: the environment is never left half-promoted.
    let failure: { failedCheck?: string; reason: string } | undefined;
    try {
      log(`applying the phase ${to} flag preset and waiting for every node`);
      await applyPreset(pool, environment, phasePreset(to), actor);
      log(`checking phase ${to} after the flip`);
      const after = await smoke(
        pool,
        environment,
        { phase: to, when: 'after' },
        expectationsOf(to, options.expectationsFile),
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
    if (failure) {
      log(
        `${failure.failedCheck ? `check ${failure.failedCheck} failed` : failure.reason}: putting the phase ${from} flags back`,
      );
      await applyPreset(pool, environment, previous, actor);
      const outcome: PromotionOutcome = { status: 'rolled-back', from, ...failure };
      await record(pool, environment, from, to, outcome, actor);
      return outcome;
    }
    const outcome: PromotionOutcome = { status: 'promoted', from };
    await record(pool, environment, from, to, outcome, actor);
    return outcome;
  } finally {
    await pool.end();
  }
}

/** Back to the phase before the last promotion (its flag preset), recorded as a rollback. */
export async function rollback(environment: Environment, actor: string, log: (line: string) => void) {
  const pool = createPool(environment.target.databaseUrl, { max: 2, applicationName: 'workbench-rollback' });
  try {
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
    await pool.end();
  }
}

export type { CheckResult };
