import { userInfo } from 'node:os';
import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { resolveEnvironment } from '../environments/environment.js';
import { exitCodeOf, outcomeLine } from '../promotion/exit-codes.js';
import {
  analysisOption,
  environmentNameOption,
  metricsFileOption,
  phaseOption,
  prometheusOption,
  targetExpectations,
} from '../promotion/inputs.js';
import { PROMOTION_LOCK_STALE_MS } from '../promotion/lock.js';
import { planLines } from '../promotion/plan.js';
import { type PromotionOutcome, promote, rollback, type SmokeRun } from '../promotion/promote.js';
import { junitPathOption, type TestCase, type TestSuite, writeJunitFile } from '../report/junit.js';
import { type CheckResult, formatResult, junitCase } from '../smoke/run.js';

/** `--env E`, read and checked: a missing or bad environment (its file, a secret's variable) is bad input. */
function environmentOption(name: string | undefined) {
  if (!name) throw new UsageError('needs --env E');
  environmentNameOption('--env', name);
  try {
    return resolveEnvironment(name);
  } catch (error) {
    if (error instanceof UsageError) throw error;
    throw new UsageError(`--env ${name}: ${(error as Error).message}`);
  }
}

/**
 * `workbench promote --env E --to N [...]`: every input checked before anything changes; exit 0 promoted
 * (or a dry run's plan), 1 rolled back, 2 bad input, 3 blocked (nothing changed), 4 the rollback failed.
 */
const PROMOTE_OPTIONS = {
  env: { type: 'string', value: 'E', help: 'the environment (required)' },
  to: { type: 'string', value: 'N', help: 'the target phase (0-4; required)' },
  'require-passed-in': {
    type: 'string',
    value: 'S',
    help: 'refuse unless phase N has passed its checks in environment S',
  },
  expectations: {
    type: 'string',
    value: 'FILE',
    help: "the target phase's expectations other than its phase folder's",
  },
  actor: {
    type: 'string',
    value: 'NAME',
    help: 'who promotes, as audited (default: WORKBENCH_ACTOR, else the user)',
  },
  analysis: {
    type: 'string',
    value: 'FILE|default',
    help: "an analysis (Argo Rollouts subset, YAML) run before the flip and during a bake after it; default: each phase's phases/phaseN/analysis.yaml",
  },
  prometheus: {
    type: 'string',
    value: 'URL',
    help: "the Prometheus the analysis asks (default: the environment file's prometheusUrl)",
  },
  'metrics-file': {
    type: 'string',
    value: 'FILE',
    help: "write the analysis's series there after each measurement (Prometheus text format)",
  },
  resume: { type: 'boolean', help: 'go on with the promotion an inconclusive analysis paused (audited)' },
  abort: {
    type: 'boolean',
    help: 'end the paused promotion: nothing changed before the flip; after it, the flags are put back',
  },
  'dry-run': {
    type: 'boolean',
    help: 'check the inputs, lock, policy and health, print the plan (flag changes per node, checks); change nothing',
  },
  'allow-skip': { type: 'boolean', help: 'allow moving more than one phase at once (audited)' },
  'force-unlock': {
    type: 'boolean',
    help: `take over another promotion's lock if it is older than ${PROMOTION_LOCK_STALE_MS / 60_000} minutes`,
  },
  json: { type: 'boolean', help: 'JSON lines on stdout: one per step and check, then the outcome' },
  junit: {
    type: 'string',
    value: 'FILE',
    help: 'also write a JUnit XML report there (a testsuite per smoke run)',
  },
} as const satisfies OptionSpec;

export const promoteCommand = defineCommand({
  synopsis: [
    'promote --env E --to N [--require-passed-in S] [--expectations FILE] [--analysis FILE|default] [--prometheus URL] [--metrics-file FILE] [--actor NAME] [--json] [--junit FILE] [--dry-run] [--allow-skip] [--force-unlock]',
    'promote --env E --to N --resume|--abort [--analysis FILE] [--prometheus URL] [--actor NAME] [--json]',
  ],
  about: `Checks every input first, takes the environment's promotion lock, then health, policy, smoke, flip to
phase N's flags, smoke again; rolls back on failure. With --analysis, its metrics are measured before the
flip (baseline) and after it (bake): a failure aborts (before the flip: blocked; after: rolled back), an
inconclusive result (no data, errors) pauses for a human (--resume, --abort). One phase at a time unless
--allow-skip. Prints each step, check and measurement as it finishes. Exit codes: 0 promoted (or --dry-run's
plan), 1 failed and rolled back, 2 bad input (nothing read after it, nothing changed), 3 blocked before any
change (lock held, a skip, policy, health, the current phase's checks, the baseline analysis, a pause),
4 the rollback itself failed (a human must look), 5 paused by an inconclusive analysis.`,
  options: PROMOTE_OPTIONS,
  jsonErrors: true,
  run: runPromoteCommand,
});

async function runPromoteCommand({ values, positionals }: Parsed<typeof PROMOTE_OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  // Every input before anything else: a bad one exits 2 naming it, with nothing opened or changed.
  const to = phaseOption('--to', values.to);
  const requirePassedIn = environmentNameOption('--require-passed-in', values['require-passed-in']);
  const junit = junitPathOption(values.junit);
  const expectations = targetExpectations(to, values.expectations);
  if (values.resume && values.abort) throw new UsageError('give --resume or --abort, not both');
  const decision = values.resume ? 'resume' : values.abort ? 'abort' : undefined;
  const analysis = analysisOption(values.analysis, to);
  const environment = environmentOption(values.env);
  const prometheusUrl = prometheusOption(values.prometheus, environment, analysis, decision);
  const metricsFile = metricsFileOption(values['metrics-file']);
  const started = Date.now();
  const elapsedMs = () => Date.now() - started;
  // --json: JSON lines (a step, a check, the outcome), each as it happens (docs/promotion.md).
  const out = values.json ? (event: object) => console.log(JSON.stringify(event)) : undefined;
  const stamp = () => `[${(elapsedMs() / 1000).toFixed(1).padStart(6)} s]`;
  // Each smoke run's results, for --junit: a testsuite per run.
  const runs: Array<SmokeRun & { timestamp: string; results: CheckResult[] }> = [];
  let outcome: PromotionOutcome | undefined;
  let error: unknown;
  try {
    outcome = await promote({
      environment,
      to,
      actor: values.actor ?? process.env.WORKBENCH_ACTOR ?? userInfo().username,
      requirePassedIn,
      expectations,
      allowSkip: values['allow-skip'],
      forceUnlock: values['force-unlock'],
      dryRun: values['dry-run'],
      analysis,
      prometheusUrl,
      metricsFile,
      decision,
      onMeasurement: (measurement) => out?.({ type: 'measurement', ...measurement, elapsedMs: elapsedMs() }),
      log: (line) =>
        out
          ? out({ type: 'step', message: line, elapsedMs: elapsedMs() })
          : console.log(`${stamp()} ${line}`),
      onCheck: (run, result) => {
        let current = runs.at(-1);
        if (current?.phase !== run.phase || current.when !== run.when) {
          current = { ...run, timestamp: new Date().toISOString(), results: [] };
          runs.push(current);
        }
        current.results.push(result);
        if (out) out({ type: 'check', phase: run.phase, when: run.when, ...result, elapsedMs: elapsedMs() });
        else console.log(`${stamp()} ${formatResult(result)}`);
      },
    });
  } catch (caught) {
    if (caught instanceof UsageError) {
      error = caught;
      throw caught;
    }
    // promote() catches everything from the flip on (rolled back, or rollback-failed): an error that
    // reaches here came before any change (the database unreachable, a node's answer unreadable).
    outcome = { status: 'blocked', from: environment.phase, reason: `error: ${(caught as Error).message}` };
  } finally {
    if (junit) writeJunitFile(junit, promotionSuites(environment.name, to, runs, started, outcome, error));
  }
  const exitCode = exitCodeOf(outcome);
  if (out)
    out({ type: 'outcome', environment: environment.name, to, ...outcome, exitCode, elapsedMs: elapsedMs() });
  else if (outcome.plan) for (const line of planLines(environment.name, outcome.plan)) console.log(line);
  else console.log(outcomeLine(environment.name, to, outcome));
  return exitCode;
}

/**
 * A promotion as JUnit: a testsuite per smoke run (the phase's checks before the flip, the target's after)
 * and one named for the promotion whose one case, `promotion`, fails unless it was promoted (blocked,
 * rolled back, or an error), saying why. That case's time is the promotion's own steps (health, policy,
 * the flip, waiting for the nodes), without its checks: those are already in the smoke suites, and a
 * report's times add up (each suite's, and `<testsuites>`'s, the promotion's duration).
 */
export function promotionSuites(
  environment: string,
  to: number,
  runs: Array<SmokeRun & { timestamp: string; results: CheckResult[] }>,
  started: number,
  outcome: PromotionOutcome | undefined,
  error: unknown,
): TestSuite[] {
  const suites: TestSuite[] = runs.map((run) => ({
    name: `promote ${environment}: phase ${run.phase} ${run.when} the flip`,
    timestamp: run.timestamp,
    cases: run.results.map((result) =>
      junitCase(result, `promote.${environment}.phase${run.phase}.${run.when}`),
    ),
  }));
  const checksMs = runs.reduce(
    (sum, run) => sum + run.results.reduce((own, result) => own + result.ms, 0),
    0,
  );
  const base = {
    name: 'promotion',
    classname: `promote.${environment}`,
    ms: Math.max(0, Date.now() - started - checksMs),
  };
  // The exit code is in the case too, as --json's outcome has it: a report alone says how the run ended.
  const exit = outcome ? exitCodeOf(outcome) : 2;
  const promotion: TestCase =
    outcome && exit === 0
      ? {
          ...base,
          status: 'passed',
          detail: `${outcome.plan ? `dry run: would promote from phase ${outcome.from}` : `promoted from phase ${outcome.from}`} to phase ${to} (exit 0)`,
        }
      : {
          ...base,
          status: 'failed',
          type: outcome?.status ?? 'error',
          message: outcome
            ? `${outcomeLine(environment, to, outcome)} (exit ${exit})`
            : `promote failed: ${(error as Error)?.message} (exit ${exit})`,
        };
  suites.push({
    name: `promote ${environment} to phase ${to}`,
    timestamp: new Date(started).toISOString(),
    cases: [promotion],
  });
  return suites;
}

/** `workbench rollback --env E`: back to the phase before the last promotion. */
const ROLLBACK_OPTIONS = {
  env: { type: 'string', value: 'E', help: 'the environment (required)' },
  actor: {
    type: 'string',
    value: 'NAME',
    help: 'who rolls back, as audited (default: WORKBENCH_ACTOR, else the user)',
  },
} as const satisfies OptionSpec;

export const rollbackCommand = defineCommand({
  synopsis: ['rollback --env E [--actor NAME]'],
  about: `Back to the phase before the last promotion (its flag preset), recorded and audited as a rollback.`,
  options: ROLLBACK_OPTIONS,
  run: runRollbackCommand,
});

async function runRollbackCommand({ values, positionals }: Parsed<typeof ROLLBACK_OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const environment = environmentOption(values.env);
  const last = await rollback(
    environment,
    values.actor ?? process.env.WORKBENCH_ACTOR ?? userInfo().username,
    (line) => console.log(line),
  );
  console.log(`rolled ${environment.name} back to phase ${last.fromPhase}`);
  return 0;
}
