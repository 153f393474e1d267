/**
 * `workbench audit rebaseline --checkpoint FILE --reason TEXT [--actor A]`: after a database restore to an
 * older point the verifier's checkpoint names rows the restored chains no longer have, and the verifier
 * rightly reports them broken (it cannot tell a restore from tampering). Re-baselining is the operator's
 * statement that it was a restore, so it is done on the record:
 *
 * 1. the old checkpoint is kept, read-only, next to the file (`FILE.before-rebaseline-<UTC time>`), never
 *    deleted: it is the evidence of what the chains were;
 * 2. a `verifier.rebaselined` event goes on the cluster audit chain (who, why, the kept file's name, per mesh
 *    the checkpoint's head and the chain's head now, for every mesh where they differ);
 * 3. a fresh checkpoint at the current heads (the cluster chain's includes that event) replaces FILE.
 *
 * The old file is copied aside rather than renamed, so FILE always exists: it is replaced atomically in
 * step 3 (checkpoint.ts). A missing or unusable checkpoint is refused before anything is touched, and so is
 * a follow verifier connected to the same database (it keeps the checkpoint in memory and would write the
 * old one back on its next pass).
 */
import { constants } from 'node:fs';
import { chmod, copyFile, unlink } from 'node:fs/promises';
import { resolve } from 'node:path';
import { appendSerialized } from '../../broker/audit/audit.shared.js';
import { createPool, type Pool } from '../../broker/db/pool.js';
import { CLUSTER_CHAIN_ID } from '../../flags/changes.js';
import {
  type Checkpoint,
  type CheckpointEntry,
  CheckpointError,
  checkWritable,
  readCheckpoint,
  writeCheckpoint,
} from './checkpoint.js';
import { VERIFIER_APPLICATION_NAME } from './run.js';

export interface RebaselineOptions {
  databaseUrl: string;
  checkpointFile: string;
  reason: string;
  actor: string;
}

/** One mesh whose checkpoint entry the re-baseline moves (null: none before, or no rows left). */
export interface MovedHead {
  meshId: string;
  old: CheckpointEntry | null;
  new: CheckpointEntry | null;
}

/** A precondition that does not hold (a verifier still following): nothing was changed, exit 1. */
export class RebaselineRefused extends Error {}

export async function rebaseline(options: RebaselineOptions): Promise<number> {
  const { checkpointFile: file } = options;
  const old = await readCheckpoint(file);
  if (!old) {
    throw new CheckpointError(
      `checkpoint ${file} does not exist: there is nothing to re-baseline (a verifier given a new file starts fresh by itself)`,
    );
  }
  await checkWritable(file);

  const pool = createPool(options.databaseUrl, { max: 2, applicationName: 'workbench-audit-rebaseline' });
  try {
    await refuseWhileFollowed(pool);
    const before = await currentHeads(pool);
    const moved = movedHeads(old, before);
    const kept = `${file}.before-rebaseline-${utcStamp(new Date())}`;
    await copyFile(file, kept, constants.COPYFILE_EXCL);
    await chmod(kept, 0o400);
    try {
      await appendSerialized(pool, CLUSTER_CHAIN_ID, [
        {
          meshId: CLUSTER_CHAIN_ID,
          eventType: 'verifier.rebaselined',
          actor: options.actor,
          payload: {
            reason: options.reason,
            checkpoint: resolve(file),
            keptAs: resolve(kept),
            meshes: before.size,
            unchanged: [...before].filter(([mesh, head]) => sameEntry(old.get(mesh), head)).length,
            moved,
          },
        },
      ]);
    } catch (error) {
      // Not audited: the copy goes again, the checkpoint was never touched.
      await chmod(kept, 0o600).catch(() => {});
      await unlink(kept).catch(() => {});
      throw error;
    }
    // After the event, so the fresh checkpoint holds the event's own row on the cluster chain.
    const fresh = await currentHeads(pool);
    await writeCheckpoint(file, fresh);
    console.log(
      `re-baselined checkpoint ${file}: the old one is kept as ${kept}; ${moved.length} of ${old.size} mesh entries moved (listed in the audit event), ${fresh.size} mesh${fresh.size === 1 ? '' : 'es'} at their current heads`,
    );
    console.log(
      `audited: verifier.rebaselined by ${options.actor} on the cluster chain (seq ${fresh.get(CLUSTER_CHAIN_ID)?.seq})`,
    );
    return 0;
  } finally {
    await pool.end();
  }
}

/** A follow verifier on this database would write its in-memory (old) checkpoint back over the new one. */
async function refuseWhileFollowed(pool: Pool): Promise<void> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND application_name = $1`,
    [VERIFIER_APPLICATION_NAME],
  );
  if ((rows[0]?.n ?? 0) > 0) {
    throw new RebaselineRefused(
      'an audit verifier (audit verify --follow) is connected to this database: stop it first (it keeps the checkpoint in memory and would write the old one back), then start it again after the re-baseline; nothing was changed',
    );
  }
}

/** Every mesh's newest row (a forked head: the lowest id of its level, any of them holds). */
async function currentHeads(pool: Pool): Promise<Checkpoint> {
  const { rows } = await pool.query<{ meshId: string; seq: number; hash: string }>(
    `SELECT DISTINCT ON (mesh_id) mesh_id AS "meshId", seq, hash FROM public.audit_log
      ORDER BY mesh_id, seq DESC, id`,
  );
  return new Map(rows.map((r) => [r.meshId, { seq: r.seq, hash: r.hash }]));
}

/** The meshes the old checkpoint knew whose entry changes: what the re-baseline forgives. */
function movedHeads(old: Checkpoint, now: Checkpoint): MovedHead[] {
  return [...old]
    .filter(([mesh, entry]) => !sameEntry(entry, now.get(mesh)))
    .map(([meshId, entry]) => ({ meshId, old: entry, new: now.get(meshId) ?? null }))
    .sort((a, b) => (a.meshId < b.meshId ? -1 : 1));
}

function sameEntry(a: CheckpointEntry | undefined, b: CheckpointEntry | undefined): boolean {
  return a !== undefined && b !== undefined && a.seq === b.seq && a.hash === b.hash;
}

/** 20261201T101500.123Z: sorts by time, no characters a shell or a file system minds. */
function utcStamp(at: Date): string {
  return at.toISOString().replace(/[-:]/g, '');
}
