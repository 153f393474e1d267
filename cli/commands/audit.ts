import { parse, portOption, positiveInt, UsageError } from '../args.js';
import { databaseUrlFor } from '../database.js';
import { environmentDatabaseUrl } from '../environments/environment.js';
import { CheckpointError } from '../verifier/checkpoint.js';
import { verifyOnce } from '../verifier/once.js';
import { runVerifier } from '../verifier/run.js';

/**
 * `workbench audit verify [--env E | --database-url URL] [--mesh ID] [--json] [--checkpoint FILE]`: walks each mesh's chain straight from
 * Postgres, independent of any node (cli/verifier/once.ts); exits 1 when any chain is broken or forked, or
 * no longer holds the checkpoint. With `--follow` it keeps going as the independent verifier process
 * (cli/verifier/): incremental passes every `--interval-ms`, a full rescan every `--rescan-ms`, findings
 * on its own /metrics. A checkpoint file that cannot be used exits 2 and changes nothing.
 */
export async function auditCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    mesh: { type: 'string' },
    json: { type: 'boolean' },
    'database-url': { type: 'string' },
    env: { type: 'string' },
    checkpoint: { type: 'string' },
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
  if (values.checkpoint === '') throw new UsageError('--checkpoint needs a file name');
  if (values.env !== undefined && values['database-url'] !== undefined)
    throw new UsageError('--env and --database-url name the database twice: give one');
  // --env E: environment E's database (environments/E.json's databaseUrlEnv, or the local cluster's).
  const databaseUrl = () =>
    values.env !== undefined ? environmentDatabaseUrl(values.env) : databaseUrlFor(values['database-url']);
  try {
    if (values.follow) {
      if (values.json) throw new UsageError('--json does not go with --follow (findings go to /metrics)');
      return await runVerifier({
        databaseUrl: databaseUrl(),
        meshId: values.mesh?.toLowerCase(),
        intervalMs: positiveInt('--interval-ms', values['interval-ms'], 1000),
        rescanMs: positiveInt('--rescan-ms', values['rescan-ms'], 300_000),
        host: values.host ?? '127.0.0.1',
        port: portOption('--metrics-port', values['metrics-port'], VERIFIER_METRICS_PORT),
        checkpointFile: values.checkpoint,
      });
    }
    for (const option of ['interval-ms', 'rescan-ms', 'metrics-port', 'host'] as const) {
      if (values[option] !== undefined) throw new UsageError(`--${option} needs --follow`);
    }
    return await verifyOnce({
      databaseUrl: databaseUrl(),
      meshId: values.mesh,
      json: values.json ?? false,
      checkpointFile: values.checkpoint,
    });
  } catch (error) {
    if (!(error instanceof CheckpointError)) throw error;
    console.error(`workbench audit: ${error.message}`);
    return 2;
  }
}

/** The verifier's metrics port by default (0 picks a free one, printed at start). */
const VERIFIER_METRICS_PORT = 9464;
