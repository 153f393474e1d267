/**
 * The local cluster's state folder, `.workbench/`: the owner's only (0700, its files 0600), since it holds
 * the cluster file (tokens, the bus secret, Redis credentials), logs and the private Redis configuration.
 * Its own module so that what lives in it (cluster.json, a private redis-server) can reach it without
 * importing the cluster as a whole.
 */
import { chmodSync, fchmodSync, mkdirSync, openSync } from 'node:fs';
import { join } from 'node:path';

export const stateDir = (cwd = process.cwd()) => join(cwd, '.workbench');
export const clusterFilePath = (cwd = process.cwd()) => join(stateDir(cwd), 'cluster.json');

const PRIVATE_DIR = 0o700;
export const PRIVATE_FILE = 0o600;

/**
 * Creates `.workbench/` and its `logs/` and `flags/` for the owner only. `mode` applies only to a folder
 * mkdir creates, so a folder left by an older workbench (0755) is narrowed too.
 */
export function ensurePrivateStateDir(cwd = process.cwd()): string {
  const dir = stateDir(cwd);
  for (const folder of [dir, join(dir, 'logs'), join(dir, 'flags')]) {
    mkdirSync(folder, { recursive: true, mode: PRIVATE_DIR });
    chmodSync(folder, PRIVATE_DIR);
  }
  return dir;
}

/** A log under `.workbench/logs/` opened for appending, the owner's only (an older one 0644 is narrowed). */
export function openPrivateLog(dir: string, name: string): number {
  const fd = openSync(join(dir, 'logs', name), 'a', PRIVATE_FILE);
  fchmodSync(fd, PRIVATE_FILE);
  return fd;
}
