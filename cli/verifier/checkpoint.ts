/**
 * The verifier's checkpoint: per mesh, the seq and hash of the last row it verified, kept in a file outside
 * the audited database that only the verifier writes. The chain alone cannot show that its newest rows
 * were deleted (what is left still links) or that it was recomputed from a rewritten row on (every hash
 * holds again); the checkpoint can, because the row it names must still be there with the same hash.
 *
 * The file is JSON, `{"version": 1, "meshes": {"<mesh id>": {"seq": 12, "hash": "<64 hex>"}}}`, written
 * whole to a temporary file next to it (mode 0600) and renamed over it, so a crash leaves the old or the
 * new checkpoint, never half of one.
 */
import { randomBytes } from 'node:crypto';
import { open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

export interface CheckpointEntry {
  seq: number;
  hash: string;
}

/** Mesh id (lower case) → the last verified row. */
export type Checkpoint = Map<string, CheckpointEntry>;

/** The checkpoint file cannot be used (unreadable, not a checkpoint, writable by others): exit 2. */
export class CheckpointError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CheckpointError';
  }
}

const VERSION = 1;
const MESH_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HASH = /^[0-9a-f]{64}$/;

/** The checkpoint in `path`, or `undefined` when there is no such file yet (a first run starts fresh). */
export async function readCheckpoint(path: string): Promise<Checkpoint | undefined> {
  let text: string;
  try {
    const info = await stat(path);
    // Anyone else who can write the file can move the checkpoint back along with the chain.
    if ((info.mode & 0o022) !== 0) {
      throw new CheckpointError(
        `checkpoint ${path} is writable by others (mode ${(info.mode & 0o777).toString(8)}): chmod 600 it`,
      );
    }
    text = await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    if (error instanceof CheckpointError) throw error;
    throw new CheckpointError(`checkpoint ${path} cannot be read: ${(error as Error).message}`);
  }
  return parseCheckpoint(text, path);
}

export function parseCheckpoint(text: string, path: string): Checkpoint {
  const bad = (why: string) => new CheckpointError(`checkpoint ${path} is not a valid checkpoint: ${why}`);
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    throw bad(`not JSON (${(error as Error).message})`);
  }
  if (typeof document !== 'object' || document === null || Array.isArray(document))
    throw bad('not an object');
  const { version, meshes } = document as { version?: unknown; meshes?: unknown };
  if (version !== VERSION) throw bad(`version is ${JSON.stringify(version)}, expected ${VERSION}`);
  if (typeof meshes !== 'object' || meshes === null || Array.isArray(meshes))
    throw bad('"meshes" is not an object');
  const checkpoint: Checkpoint = new Map();
  for (const [meshId, entry] of Object.entries(meshes)) {
    if (!MESH_ID.test(meshId)) throw bad(`"${meshId}" is not a mesh id (a lower-case UUID)`);
    const { seq, hash } = (entry ?? {}) as { seq?: unknown; hash?: unknown };
    if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 1)
      throw bad(`mesh ${meshId}: seq ${JSON.stringify(seq)} is not a chain position`);
    if (typeof hash !== 'string' || !HASH.test(hash))
      throw bad(`mesh ${meshId}: hash ${JSON.stringify(hash)} is not a SHA-256 hex digest`);
    checkpoint.set(meshId, { seq, hash });
  }
  return checkpoint;
}

/** Replaces the file atomically: a temporary file in the same directory (mode 0600), synced, renamed. */
export async function writeCheckpoint(path: string, checkpoint: Checkpoint): Promise<void> {
  const meshes = Object.fromEntries([...checkpoint].sort(([a], [b]) => (a < b ? -1 : 1)));
  const text = `${JSON.stringify({ version: VERSION, meshes }, null, 2)}\n`;
  const temporary = join(
    dirname(path),
    `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}`,
  );
  const file = await open(temporary, 'wx', 0o600);
  try {
    await file.writeFile(text, 'utf8');
    await file.sync();
  } catch (error) {
    await file.close();
    await unlink(temporary).catch(() => {});
    throw error;
  }
  await file.close();
  try {
    await rename(temporary, path);
  } catch (error) {
    await unlink(temporary).catch(() => {});
    throw error;
  }
}

/** Fails early (before anything is verified) when the checkpoint could not be written later. */
export async function checkWritable(path: string): Promise<void> {
  const probe = join(dirname(path), `.${basename(path)}.${process.pid}.probe`);
  try {
    const file = await open(probe, 'wx', 0o600);
    await file.close();
    await unlink(probe);
  } catch (error) {
    throw new CheckpointError(
      `checkpoint ${path} cannot be written (its directory): ${(error as Error).message}`,
    );
  }
}
