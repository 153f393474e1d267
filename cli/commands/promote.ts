import { userInfo } from 'node:os';
import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { resolveEnvironment } from '../environments/environment.js';
import { promote, rollback } from '../promotion/promote.js';

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
  run: runPromoteCommand,
});

async function runPromoteCommand({ values, positionals }: Parsed<typeof PROMOTE_OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (values.to === undefined || !/^[0-4]$/.test(values.to))
    throw new UsageError('--to must be 0, 1, 2, 3 or 4');
  const environment = environmentOption(values.env);
  const outcome = await promote({
    environment,
    to: Number(values.to),
    actor: values.actor ?? process.env.WORKBENCH_ACTOR ?? userInfo().username,
    requirePassedIn: values['require-passed-in'],
    expectationsFile: values.expectations,
    log: (line) => console.log(line),
  });
  const check = outcome.failedCheck ? ` (check ${outcome.failedCheck})` : '';
  console.log(
    outcome.status === 'promoted'
      ? `promoted ${environment.name} from phase ${outcome.from} to phase ${values.to}`
      : `${outcome.status === 'blocked' ? 'blocked, nothing changed' : 'rolled back to the previous flags'}: ${outcome.reason}${check}`,
  );
  return outcome.status === 'promoted' ? 0 : 1;
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
