import { userInfo } from 'node:os';
import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { resolveEnvironment } from '../environments/environment.js';
import { type PromotionOutcome, promote, rollback, type SmokeRun } from '../promotion/promote.js';
import { junitPathOption, type TestCase, type TestSuite, writeJunitFile } from '../report/junit.js';
import { type CheckResult, formatResult, junitCase } from '../smoke/run.js';

function environmentOption(name: string | undefined) {
  if (!name) throw new UsageError('needs --env E');
  return resolveEnvironment(name);
}

/**
 * `workbench promote --env E --to N [--require-passed-in S] [--expectations FILE] [--actor NAME]`: exit 0 when
 * promoted; 1 when blocked (nothing changed) or rolled back (a check failed after the flip), naming the check.
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
  json: { type: 'boolean', help: 'JSON lines on stdout: one per step and check, then the outcome' },
  junit: {
    type: 'string',
    value: 'FILE',
    help: 'also write a JUnit XML report there (a testsuite per smoke run)',
  },
} as const satisfies OptionSpec;

export const promoteCommand = defineCommand({
  synopsis: [
    'promote --env E --to N [--require-passed-in S] [--expectations FILE] [--actor NAME] [--json] [--junit FILE]',
  ],
  about: `Health, smoke, flip to phase N's flags, smoke again; roll back on failure. Prints each step and check as
it finishes; exit 0 when promoted, 1 when blocked (nothing changed) or rolled back, naming the check.`,
  options: PROMOTE_OPTIONS,
  jsonErrors: true,
  run: runPromoteCommand,
});

async function runPromoteCommand({ values, positionals }: Parsed<typeof PROMOTE_OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (values.to === undefined || !/^[0-4]$/.test(values.to))
    throw new UsageError('--to must be 0, 1, 2, 3 or 4');
  const junit = junitPathOption(values.junit);
  const environment = environmentOption(values.env);
  const to = Number(values.to);
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
      requirePassedIn: values['require-passed-in'],
      expectationsFile: values.expectations,
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
    error = caught;
    throw caught;
  } finally {
    if (junit) writeJunitFile(junit, promotionSuites(environment.name, to, runs, started, outcome, error));
  }
  const check = outcome.failedCheck ? ` (check ${outcome.failedCheck})` : '';
  if (out)
    out({
      type: 'outcome',
      environment: environment.name,
      to,
      ...outcome,
      elapsedMs: elapsedMs(),
    });
  else
    console.log(
      outcome.status === 'promoted'
        ? `promoted ${environment.name} from phase ${outcome.from} to phase ${to}`
        : `${outcome.status === 'blocked' ? 'blocked, nothing changed' : 'rolled back to the previous flags'}: ${outcome.reason}${check}`,
    );
  return outcome.status === 'promoted' ? 0 : 1;
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
  const promotion: TestCase =
    outcome?.status === 'promoted'
      ? { ...base, status: 'passed', detail: `promoted from phase ${outcome.from} to phase ${to}` }
      : {
          ...base,
          status: 'failed',
          type: outcome?.status ?? 'error',
          message: outcome
            ? `${outcome.status === 'blocked' ? 'blocked, nothing changed' : 'rolled back to the previous flags'}: ${outcome.reason}${outcome.failedCheck ? ` (check ${outcome.failedCheck})` : ''}`
            : `promote failed: ${(error as Error)?.message}`,
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
