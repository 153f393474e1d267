import { userInfo } from 'node:os';
import { parse, UsageError } from '../args.js';
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
export async function promoteCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    env: { type: 'string' },
    to: { type: 'string' },
    'require-passed-in': { type: 'string' },
    expectations: { type: 'string' },
    actor: { type: 'string' },
  });
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
export async function rollbackCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, { env: { type: 'string' }, actor: { type: 'string' } });
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
