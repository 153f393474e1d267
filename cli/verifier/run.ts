/**
 * `workbench audit verify --follow [--checkpoint FILE]`: runs the AuditFollower every `intervalMs` until
 * SIGTERM/SIGINT and serves what it found on its own /metrics. Prints one line per finding and one when it
 * listens. The checkpoint file is read (a corrupt one refused) before anything else happens.
 */
import { hostname } from 'node:os';
import type { Finding } from '../../broker/audit/chain-walker.js';
import { createPool } from '../../broker/db/pool.js';
import { type Checkpoint, checkWritable, readCheckpoint } from './checkpoint.js';
import { AuditFollower } from './follow.js';
import { VerifierMetrics } from './metrics.js';

/** How the follow verifier names its connections (rebaseline.ts refuses to run while one is connected). */
export const VERIFIER_APPLICATION_NAME = 'workbench-audit-verifier';

export interface RunOptions {
  databaseUrl: string;
  meshId?: string;
  intervalMs: number;
  rescanMs: number;
  host: string;
  port: number;
  /** Where the checkpoint is kept; without it, in memory only (tail deletion is still seen while it runs). */
  checkpointFile?: string;
}

export async function runVerifier(options: RunOptions): Promise<number> {
  const checkpoint = await loadCheckpoint(options.checkpointFile);
  const nodeId = process.env.NODE_ID || `audit-verifier-${hostname()}`;
  const metrics = new VerifierMetrics(nodeId);
  const pool = createPool(options.databaseUrl, { max: 2, applicationName: VERIFIER_APPLICATION_NAME });
  const server = await metrics.serve(options.host, options.port);
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  console.log(`audit verifier ${nodeId}: metrics on http://${options.host}:${port}/metrics`);

  const onFinding = (f: Finding) =>
    console.log(`${f.kind.toUpperCase()}  mesh ${f.meshId} seq ${f.seq} (row id ${f.id}): ${f.reason}`);
  const follower = new AuditFollower({
    pool,
    metrics,
    meshId: options.meshId,
    gapGraceMs: Math.max(5000, 2 * options.intervalMs),
    onFinding,
    checkpoint,
    checkpointFile: options.checkpointFile,
  });

  let stopping = false;
  let wake: (() => void) | undefined;
  const stop = () => {
    stopping = true;
    wake?.();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);

  let lastRescan = Date.now();
  let failing = false;
  while (!stopping) {
    const rescan = Date.now() - lastRescan >= options.rescanMs;
    try {
      await follower.pass(rescan ? 'rescan' : 'incremental');
      if (rescan) lastRescan = Date.now();
      if (failing) console.log('audit verifier: the database answers again');
      failing = false;
    } catch (error) {
      // Postgres away: keep the last figures (db_up says 0) and try again next interval.
      if (!failing) console.error(`audit verifier: pass failed: ${(error as Error).message}`);
      failing = true;
    }
    await new Promise<void>((resolve) => {
      wake = resolve;
      setTimeout(resolve, options.intervalMs);
    });
  }
  await new Promise((resolve) => server.close(resolve));
  await pool.end();
  return 0;
}

async function loadCheckpoint(file: string | undefined): Promise<Checkpoint> {
  if (file === undefined) return new Map();
  const checkpoint = await readCheckpoint(file);
  await checkWritable(file);
  console.log(
    checkpoint
      ? `audit verifier: checkpoint ${file}: ${checkpoint.size} mesh${checkpoint.size === 1 ? '' : 'es'}`
      : `audit verifier: checkpoint ${file}: no such file yet, starting fresh`,
  );
  return checkpoint ?? new Map();
}
