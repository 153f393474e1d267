import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../broker/paths.js';
import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { resolveEnvironment } from '../environments/environment.js';
import { CHECK_NAMES, type Expectations, formatResult, runSmoke } from '../smoke/run.js';

/**
 * `workbench smoke --phase N [--env E] [--expectations FILE] [--only A,B]`: runs the smoke checks
 * (or only the named ones) against an environment (environments/E.json, or the local cluster) and
 * exits 1 when an outcome does not meet phase N's expectations.
 */
const OPTIONS = {
  phase: { type: 'string', value: 'N', help: "judge the outcomes by phase N's expectations (0-4; required)" },
  env: { type: 'string', value: 'E', help: 'the environment (default: the local cluster)' },
  expectations: {
    type: 'string',
    value: 'FILE',
    help: 'expectations other than phases/phaseN/expectations.json',
  },
  only: { type: 'string', value: 'CHECK,CHECK', help: 'run only these checks' },
  json: { type: 'boolean', help: 'JSON lines on stdout: one per check as it finishes, then a summary' },
  junit: {
    type: 'string',
    value: 'FILE',
    help: 'also write a JUnit XML report there (one testcase per check)',
  },
} as const satisfies OptionSpec;

export const smokeCommand = defineCommand({
  synopsis: ['smoke --phase N [--env E] [--expectations FILE] [--only CHECK,CHECK] [--json] [--junit FILE]'],
  about: `Runs the smoke checks, printing each as it finishes; exit 1 if an expectation is not met.
--env E: environments/E.json in the working directory, else the local cluster (whose environment must
then be E); without --env, the local cluster.`,
  options: OPTIONS,
  run: runSmokeCommand,
});

async function runSmokeCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (values.phase === undefined || !/^[0-4]$/.test(values.phase))
    throw new UsageError('--phase must be 0, 1, 2, 3 or 4');
  const only = values.only?.split(',').map((name) => name.trim());
  const unknown = only?.find((name) => !CHECK_NAMES.includes(name));
  if (unknown !== undefined)
    throw new UsageError(`unknown check "${unknown}"; the checks: ${CHECK_NAMES.join(', ')}`);
  const environment = resolveEnvironment(values.env);
  const file =
    values.expectations ?? join(packageRoot(), 'phases', `phase${values.phase}`, 'expectations.json');
  const expectations = JSON.parse(readFileSync(file, 'utf8')) as Expectations;
  console.log(
    `smoke: phase ${values.phase} expectations against ${environment.name} (${environment.target.nodes.length} nodes behind ${environment.target.lbUrl})`,
  );
  const results = await runSmoke(environment.target, expectations, only);
  for (const result of results) console.log(formatResult(result));
  const unmet = results.filter((r) => !r.met);
  console.log(
    unmet.length === 0
      ? 'smoke: every expectation met'
      : `smoke: ${unmet.length} expectation(s) not met: ${unmet.map((r) => r.name).join(', ')}`,
  );
  return unmet.length === 0 ? 0 : 1;
}
