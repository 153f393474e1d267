import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../broker/paths.js';
import { parse, UsageError } from '../args.js';
import { readCluster } from '../cluster/local.js';
import { type Expectations, formatResult, runSmoke } from '../smoke/run.js';

/**
 * `workbench smoke --phase N [--expectations FILE]`: runs the smoke checks against the local cluster
 * (.workbench/cluster.json) and exits 1 when an outcome does not meet phase N's expectations.
 */
export async function smokeCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    phase: { type: 'string' },
    expectations: { type: 'string' },
  });
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (values.phase === undefined || !/^[0-4]$/.test(values.phase))
    throw new UsageError('--phase must be 0, 1, 2, 3 or 4');
  const cluster = readCluster();
  if (!cluster)
    throw new Error('no local cluster here (.workbench/cluster.json): start one with "workbench up"');
  const file =
    values.expectations ?? join(packageRoot(), 'phases', `phase${values.phase}`, 'expectations.json');
  const expectations = JSON.parse(readFileSync(file, 'utf8')) as Expectations;
  console.log(
    `smoke: phase ${values.phase} expectations against the phase ${cluster.phase} cluster at ${cluster.lb.url}`,
  );
  const results = await runSmoke(
    {
      lbUrl: cluster.lb.url,
      nodes: cluster.nodes,
      databaseUrl: cluster.databaseUrl,
      adminToken: cluster.adminToken,
      flagsEnv: cluster.flagsEnv,
    },
    expectations,
  );
  for (const result of results) console.log(formatResult(result));
  const unmet = results.filter((r) => !r.met);
  console.log(
    unmet.length === 0
      ? 'smoke: every expectation met'
      : `smoke: ${unmet.length} expectation(s) not met: ${unmet.map((r) => r.name).join(', ')}`,
  );
  return unmet.length === 0 ? 0 : 1;
}
