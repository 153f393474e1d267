import { verifyMesh } from '../../broker/audit/verify.js';
import { createPool } from '../../broker/db/pool.js';
import { parse, portOption, positiveInt, UsageError } from '../args.js';
import { databaseUrlFor } from '../database.js';
import { runVerifier } from '../verifier/run.js';

/**
 * `workbench audit verify [--mesh ID] [--json]`: walks each mesh's chain straight from Postgres,
 * independent of any node. Prints one line per mesh; exits 1 when any chain is broken or forked.
 * With `--follow` it keeps going as the independent verifier process (cli/verifier/): incremental passes
 * every `--interval-ms`, a full rescan every `--rescan-ms`, findings on its own /metrics.
 */
export async function auditCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    mesh: { type: 'string' },
    json: { type: 'boolean' },
    'database-url': { type: 'string' },
    follow: { type: 'boolean' },
    'interval-ms': { type: 'string' },
    'rescan-ms': { type: 'string' },
    'metrics-port': { type: 'string' },
    host: { type: 'string' },
  });
  const [action, ...extra] = positionals;
  if (action !== 'verify') throw new UsageError(`unknown audit action "${action ?? ''}" (expected "verify")`);
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  if (values.mesh !== undefined && !/^[0-9a-f-]{36}$/i.test(values.mesh))
    throw new UsageError('--mesh must be a mesh id (UUID)');
  if (values.follow) {
    if (values.json) throw new UsageError('--json does not go with --follow (findings go to /metrics)');
    return runVerifier({
      databaseUrl: databaseUrlFor(values['database-url']),
      meshId: values.mesh,
      intervalMs: positiveInt('--interval-ms', values['interval-ms'], 1000),
      rescanMs: positiveInt('--rescan-ms', values['rescan-ms'], 300_000),
      host: values.host ?? '127.0.0.1',
      port: portOption('--metrics-port', values['metrics-port'], VERIFIER_METRICS_PORT),
    });
  }
  for (const option of ['interval-ms', 'rescan-ms', 'metrics-port', 'host'] as const) {
    if (values[option] !== undefined) throw new UsageError(`--${option} needs --follow`);
  }

  const pool = createPool(databaseUrlFor(values['database-url']), {
    max: 2,
    applicationName: 'workbench-audit',
  });
  try {
    const meshIds =
      values.mesh !== undefined
        ? [values.mesh]
        : (
            await pool.query<{ meshId: string }>(
              'SELECT DISTINCT mesh_id AS "meshId" FROM audit_log ORDER BY 1',
            )
          ).rows.map((r) => r.meshId);
    let healthy = true;
    const results = [];
    for (const meshId of meshIds) {
      const result = await verifyMesh(pool, meshId);
      healthy &&= result.valid;
      results.push({ meshId, ...result });
      if (values.json) continue;
      if (result.valid) {
        console.log(`ok      ${meshId}  ${result.entries} entries, head seq ${result.head?.seq ?? 0}`);
        continue;
      }
      console.log(`BROKEN  ${meshId}  ${result.entries} entries`);
      if (result.brokenAt) {
        console.log(
          `  first broken row: seq ${result.brokenAt.seq} (row id ${result.brokenAt.id}): ${result.brokenAt.reason}`,
        );
      }
      for (const fork of result.forks) {
        console.log(`  fork: rows ${fork.rowIds.join(', ')} share the same ${fork.kind} (seq ${fork.seq})`);
      }
    }
    if (values.json) console.log(JSON.stringify({ valid: healthy, meshes: results }, null, 2));
    else if (meshIds.length === 0) console.log('no audit entries');
    return healthy ? 0 : 1;
  } finally {
    await pool.end();
  }
}

/** The verifier's metrics port by default (0 picks a free one, printed at start). */
const VERIFIER_METRICS_PORT = 9464;
