import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseFlagsDocument, renderFlagsDocument } from './document.js';
import type { FlagKey, FlagValues } from './registry.js';

/**
 * The folder of the per-environment flags files shipped with the project, under its package root. The
 * root is handed in (broker/paths.ts finds it) so that flags/ depends on nothing of broker/.
 */
export function defaultFlagsDir(packageRoot: string): string {
  return join(packageRoot, 'flags', 'environments');
}

export function flagsFile(dir: string, environment: string): string {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(environment)) throw new Error(`bad environment name "${environment}"`);
  return join(dir, `${environment}.json`);
}

/** Reads an environment's flags file; throws with the file's problems when it is unusable. */
export function readFlagsFile(path: string): FlagValues {
  const parsed = parseFlagsDocument(readFileSync(path, 'utf8'));
  if (!parsed.values) throw new Error(`${path}: ${parsed.problems.join('; ')}`);
  return parsed.values;
}

/** The flags an environment's file sets to "shadow" (none when the file is unusable). */
export function readShadowFlags(path: string): FlagKey[] {
  try {
    return parseFlagsDocument(readFileSync(path, 'utf8')).shadow;
  } catch {
    return [];
  }
}

/**
 * Replaces the file atomically (write then rename), so a watching node never reads half a file. `shadow`:
 * the flags to write as "shadow" (each must be off in `values`).
 */
export function writeFlagsFile(path: string, values: FlagValues, shadow: readonly FlagKey[] = []): void {
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, renderFlagsDocument(values, shadow));
  renameSync(temporary, path);
}
