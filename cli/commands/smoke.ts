import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../broker/paths.js';
import { parse, UsageError } from '../args.js';
import { resolveEnvironment } from '../environments/environment.js';
import { CHECK_NAMES, type Expectations, formatResult, runSmoke } from '../smoke/run.js';

/**
 * `workbench smoke --phase N [--env E] [--expectations FILE] [--only A,B]`: runs the smoke checks
 * (or only the named ones) against an environment (environments/E.json, or the local cluster) and
 * exits 1 when an outcome does not meet phase N's expectations.
 */
export async function smokeCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    phase: { type: 'string' },
    env: { type: 'string' },
    expectations: { type: 'string' },
    only: { type: 'string' },
  });
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
