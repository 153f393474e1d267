import { userInfo } from 'node:os';
import { defineCommand, type OptionSpec, type Parsed, portOption, positiveInt, UsageError } from '../args.js';
import { databaseUrlFor } from '../database.js';
import { environmentDatabaseUrl } from '../environments/environment.js';
import { CheckpointError } from '../verifier/checkpoint.js';
import { verifyOnce } from '../verifier/once.js';
import { RebaselineRefused, rebaseline } from '../verifier/rebaseline.js';
import { runVerifier } from '../verifier/run.js';

/**
 * `workbench audit verify [--env E | --database-url URL] [--mesh ID] [--json] [--checkpoint FILE]`: walks each mesh's chain straight from
 * Postgres, independent of any node (cli/verifier/once.ts); exits 1 when any chain is broken or forked, or
 * no longer holds the checkpoint. With `--follow` it keeps going as the independent verifier process
 * (cli/verifier/): incremental passes every `--interval-ms`, a full rescan every `--rescan-ms`, findings
 * on its own /metrics. A checkpoint file that cannot be used exits 2 and changes nothing.
 *
 * `workbench audit rebaseline --checkpoint FILE --reason TEXT [--actor A]`: after a restore, keeps the old
 * checkpoint aside, audits the re-baseline on the cluster chain and starts a fresh checkpoint at the
 * current heads (cli/verifier/rebaseline.ts).
 */
const OPTIONS = {
  mesh: { type: 'string', value: 'ID', help: 'only this mesh (its UUID)' },
  json: { type: 'boolean', help: 'one JSON document instead of lines (not with --follow)' },
  'database-url': {
    type: 'string',
    value: 'URL',
    help: "the database (default: DATABASE_URL, the local cluster's)",
  },
  env: {
    type: 'string',
    value: 'E',
    help: "environment E's database (environments/E.json or the local cluster)",
  },
  checkpoint: {
    type: 'string',
    value: 'FILE',
    help: 'verify: a checkpoint the chains must still hold (and, with --follow, keep); rebaseline: the one to replace',
  },
  reason: {
    type: 'string',
    value: 'TEXT',
    help: 'rebaseline: why (the restore, its ticket), as audited',
  },
  actor: {
    type: 'string',
    value: 'NAME',
    help: 'rebaseline: who, as audited (default: WORKBENCH_ACTOR, else the user)',
  },
  follow: { type: 'boolean', help: 'keep verifying as the independent verifier process' },
  'interval-ms': {
    type: 'string',
    value: 'N',
    help: 'with --follow: an incremental pass every N ms (default 1000)',
  },
  'rescan-ms': {
    type: 'string',
    value: 'N',
    help: 'with --follow: a full rescan every N ms (default 300000)',
  },
  'metrics-port': {
    type: 'string',
    value: 'P',
    help: 'with --follow: the /metrics port (default 9464; 0 picks one)',
  },
  host: { type: 'string', value: 'H', help: 'with --follow: the /metrics address (default 127.0.0.1)' },
} as const satisfies OptionSpec;

export const auditCommand = defineCommand({
  synopsis: [
    'audit verify [--mesh ID] [--checkpoint FILE] [--json] [--env E | --database-url URL]',
    'audit verify --follow [--checkpoint FILE] [--interval-ms N] [--rescan-ms N] [--metrics-port P] [--host H]',
    'audit rebaseline --checkpoint FILE --reason TEXT [--actor NAME] [--env E | --database-url URL]',
  ],
  about: `verify: walks every mesh's audit chain straight from Postgres; exit 1 if one is broken (or, with
--checkpoint, shorter than or diverging from the checkpoint). With --follow: the independent verifier,
following every chain, its findings on its /metrics. A checkpoint file that cannot be used exits 2 and
changes nothing.
rebaseline: after a database restore to an older point (the checkpoint then reports the shorter chains as
broken), keeps the old checkpoint as FILE.before-rebaseline-<time>, records verifier.rebaselined (who, why,
old and new heads) on the cluster audit chain, and writes a fresh checkpoint at the current heads. Stop the
follow verifier first. Exit 2 (nothing changed) for a missing --reason or an unusable or missing file.`,
  options: OPTIONS,
  run: runAuditCommand,
});

async function runAuditCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  const [action, ...extra] = positionals;
  if (action !== 'verify' && action !== 'rebaseline')
    throw new UsageError(`unknown audit action "${action ?? ''}" (expected "verify" or "rebaseline")`);
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
    if (action === 'rebaseline') return await runRebaseline(values, databaseUrl);
    for (const option of ['reason', 'actor'] as const) {
      if (values[option] !== undefined) throw new UsageError(`--${option} goes with rebaseline, not verify`);
    }
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
    if (error instanceof RebaselineRefused) {
      console.error(`workbench audit: ${error.message}`);
      return 1;
    }
    if (!(error instanceof CheckpointError)) throw error;
    console.error(`workbench audit: ${error.message}`);
    return 2;
  }
}

async function runRebaseline(
  values: Parsed<typeof OPTIONS>['values'],
  databaseUrl: () => string,
): Promise<number> {
  for (const option of [
    'mesh',
    'json',
    'follow',
    'interval-ms',
    'rescan-ms',
    'metrics-port',
    'host',
  ] as const) {
    if (values[option] !== undefined) throw new UsageError(`--${option} does not go with rebaseline`);
  }
  if (values.checkpoint === undefined)
    throw new UsageError('rebaseline needs --checkpoint FILE (the checkpoint to replace)');
  const reason = values.reason?.trim();
  if (!reason)
    throw new UsageError(
      'rebaseline needs --reason TEXT: why the checkpoint is re-baselined (it is audited)',
    );
  const actor = (values.actor ?? process.env.WORKBENCH_ACTOR ?? userInfo().username).trim();
  if (!actor) throw new UsageError('--actor must name someone');
  return rebaseline({ databaseUrl: databaseUrl(), checkpointFile: values.checkpoint, reason, actor });
}

/** The verifier's metrics port by default (0 picks a free one, printed at start). */
const VERIFIER_METRICS_PORT = 9464;
