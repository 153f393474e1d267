/**
 * Where the console's URL with its key goes when no terminal is there to show it: standard output may be
 * a log file (`npm start` sends it to `.workbench/logs/console.log`), and a key in a log is a key for
 * whoever reads the log. `.workbench/console.url` is created the owner's only (0600) in the owner's
 * folder (0700), and removed when the console stops.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensurePrivateStateDir, stateDir } from '../cluster/local.js';

export const consoleUrlFile = (cwd = process.cwd()) => join(stateDir(cwd), 'console.url');

export function writeConsoleUrl(url: string, cwd = process.cwd()): string {
  ensurePrivateStateDir(cwd);
  const path = consoleUrlFile(cwd);
  // Never reuse a file: one left by someone else could have any mode. `wx` creates it with ours.
  rmSync(path, { force: true });
  writeFileSync(path, `${url}\n`, { mode: 0o600, flag: 'wx' });
  return path;
}

/** Removes the file if it still holds this console's URL (a console started since keeps its own). */
export function removeConsoleUrl(url: string, cwd = process.cwd()): void {
  const path = consoleUrlFile(cwd);
  try {
    if (readFileSync(path, 'utf8').trim() === url) rmSync(path, { force: true });
  } catch {
    // already gone
  }
}
