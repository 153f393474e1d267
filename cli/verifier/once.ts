/**
 * `workbench audit verify [--mesh ID] [--json] [--checkpoint FILE]`: walks each mesh's chain straight from
 * Postgres, independent of any node. Prints one line per mesh; exits 1 when any chain is broken or forked.
 *
 * With a checkpoint, a chain must also still hold the row the last run ended at (checkpoint-check.ts): a
 * chain shorter than the checkpoint or diverging from it is broken even when every row in it verifies. The
 * checkpoint of each mesh that verified advances to its head; a broken mesh's stays where it was, so the
 * break is reported again on every run until an operator resolves it.
 */
import { type VerifyResult, verifyMesh } from '../../broker/audit/verify.js';
import { createPool, type Pool } from '../../broker/db/pool.js';
import { type Checkpoint, checkWritable, readCheckpoint, writeCheckpoint } from './checkpoint.js';
import { type CheckpointVerdict, checkCheckpoint } from './checkpoint-check.js';

export interface VerifyOnceOptions {
  databaseUrl: string;
  meshId?: string;
  json: boolean;
  checkpointFile?: string;
}

type MeshReport = { meshId: string } & VerifyResult & { checkpoint?: CheckpointVerdict };

export async function verifyOnce(options: VerifyOnceOptions): Promise<number> {
  const { checkpointFile, json } = options;
  // Notes about the checkpoint must not spoil the JSON on stdout.
  const note = (line: string) => (json ? console.error(line) : console.log(line));
  // Read (and refuse a corrupt file) before touching the database, so a bad file changes nothing.
  let checkpoint: Checkpoint | undefined;
  if (checkpointFile !== undefined) {
    checkpoint = await readCheckpoint(checkpointFile);
    await checkWritable(checkpointFile);
    if (!checkpoint) note(`checkpoint ${checkpointFile}: no such file yet, starting fresh`);
  }

  const pool = createPool(options.databaseUrl, { max: 2, applicationName: 'workbench-audit' });
  try {
    const meshIds = await meshesToVerify(pool, options.meshId, checkpoint);
    const advanced: Checkpoint = new Map(checkpoint ?? []);
    let healthy = true;
    const reports: MeshReport[] = [];
    for (const meshId of meshIds) {
      const result = await verifyMesh(pool, meshId);
      const entry = checkpoint?.get(meshId);
      const verdict = entry ? await checkCheckpoint(pool, meshId, entry) : undefined;
      const valid = result.valid && verdict?.holds !== false;
      healthy &&= valid;
      reports.push({ meshId, ...result, valid, ...(verdict ? { checkpoint: verdict } : {}) });
      if (checkpointFile !== undefined && valid && result.head) advanced.set(meshId, result.head);
      if (!json) printMesh(meshId, result, valid, verdict);
    }
    if (json) console.log(JSON.stringify({ valid: healthy, meshes: reports }, null, 2));
    else if (meshIds.length === 0) console.log('no audit entries');

    if (checkpointFile !== undefined) {
      const moved = [...advanced].filter(([mesh, e]) => checkpoint?.get(mesh)?.hash !== e.hash).length;
      if (moved > 0 || !checkpoint) await writeCheckpoint(checkpointFile, advanced);
      note(`checkpoint ${checkpointFile}: ${moved} of ${advanced.size} meshes advanced`);
    }
    return healthy ? 0 : 1;
  } finally {
    await pool.end();
  }
}

/**
 * Every mesh with audit rows, and every mesh the checkpoint knows: one whose rows were all deleted has
 * none left to list, and is the plainest case of a chain shorter than its checkpoint.
 */
async function meshesToVerify(
  pool: Pool,
  meshId: string | undefined,
  checkpoint: Checkpoint | undefined,
): Promise<string[]> {
  if (meshId !== undefined) return [meshId.toLowerCase()];
  const { rows } = await pool.query<{ meshId: string }>(
    'SELECT DISTINCT mesh_id AS "meshId" FROM public.audit_log ORDER BY 1',
  );
  return [...new Set([...rows.map((r) => r.meshId), ...(checkpoint?.keys() ?? [])])].sort();
}

function printMesh(meshId: string, result: VerifyResult, valid: boolean, verdict?: CheckpointVerdict): void {
  if (valid) {
    console.log(`ok      ${meshId}  ${result.entries} entries, head seq ${result.head?.seq ?? 0}`);
    return;
  }
  console.log(`BROKEN  ${meshId}  ${result.entries} entries`);
  if (verdict && !verdict.holds) console.log(`  checkpoint: ${verdict.message}`);
  if (result.brokenAt) {
    console.log(
      `  first broken row: seq ${result.brokenAt.seq} (row id ${result.brokenAt.id}): ${result.brokenAt.reason}`,
    );
  }
  for (const fork of result.forks) {
    console.log(`  fork: rows ${fork.rowIds.join(', ')} share the same ${fork.kind} (seq ${fork.seq})`);
  }
}
