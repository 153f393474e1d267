import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { resolveEnvironment } from '../environments/environment.js';
import { targetExpectations } from '../promotion/inputs.js';
import { junitPathOption, writeJunitFile } from '../report/junit.js';
import { CHECK_NAMES, formatResult, junitCase, runSmoke } from '../smoke/run.js';

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
  jsonErrors: true,
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
  const junit = junitPathOption(values.junit);
  // Read and checked before the environment: a bad file exits 2 naming what is wrong, as promote's does.
  const expectations = targetExpectations(Number(values.phase), values.expectations);
  const environment = resolveEnvironment(values.env);
  const started = Date.now();
  const timestamp = new Date(started).toISOString();
  const elapsedMs = () => Date.now() - started;
  // --json: JSON lines, one per check as it finishes, then the summary (docs/promotion.md); else text lines.
  const out = values.json ? (event: object) => console.log(JSON.stringify(event)) : undefined;
  const header = {
    phase: Number(values.phase),
    environment: environment.name,
    lbUrl: environment.target.lbUrl,
    nodes: environment.target.nodes.length,
  };
  if (out) out({ type: 'start', ...header, checks: only ?? CHECK_NAMES });
  else
    console.log(
      `smoke: phase ${header.phase} expectations against ${header.environment} (${header.nodes} nodes behind ${header.lbUrl})`,
    );
  const results = await runSmoke(environment.target, expectations, only, (result) =>
    out ? out({ type: 'check', ...result, elapsedMs: elapsedMs() }) : console.log(formatResult(result)),
  );
  const unmet = results.filter((r) => !r.met);
  if (junit)
    writeJunitFile(junit, [
      {
        name: `smoke phase ${header.phase} (${header.environment})`,
        timestamp,
        cases: results.map((result) => junitCase(result, `smoke.phase${header.phase}`)),
      },
    ]);
  if (out)
    out({
      type: 'summary',
      met: unmet.length === 0,
      unmet: unmet.map((r) => r.name),
      elapsedMs: elapsedMs(),
    });
  else
    console.log(
      unmet.length === 0
        ? `smoke: every expectation met (${results.length} checks in ${(elapsedMs() / 1000).toFixed(1)} s)`
        : `smoke: ${unmet.length} expectation(s) not met: ${unmet.map((r) => r.name).join(', ')}`,
    );
  return unmet.length === 0 ? 0 : 1;
}
