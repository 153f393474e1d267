/**
 * An operator's working directory as `workbench --env NAME` reads it: `environments/NAME.json` beside where
 * the command runs (docs/promotion.md).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Writes `cwd/environments/NAME.json` (an object as JSON, a string as it is); returns the file's path. */
export function writeEnvironmentFile(cwd: string, name: string, content: unknown): string {
  mkdirSync(join(cwd, 'environments'), { recursive: true });
  const path = join(cwd, 'environments', `${name}.json`);
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content, null, 2));
  return path;
}

/** Runs `use` in a throw-away operator directory, removed afterwards whatever happens. */
export async function inOperatorDir<T>(prefix: string, use: (cwd: string) => Promise<T>): Promise<T> {
  const cwd = mkdtempSync(join(tmpdir(), prefix));
  try {
    return await use(cwd);
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
}
