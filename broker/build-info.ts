import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from './paths.js';

/** What `mesh_broker_build_info` says about the code a node runs (docs/observability.md § Build info). */
export interface BuildInfo {
  /** package.json's `version`. */
  version: string;
  /** The commit the code was built from, or `unknown` when nothing said. */
  commit: string;
}

/** A commit as a label value: hex, 7-40 characters; anything else is not trusted and reads `unknown`. */
const COMMIT = /^[0-9a-f]{7,40}$/i;

/**
 * The running code's version (package.json) and commit: MESH_BUILD_COMMIT when set, else the build stamp
 * `BUILD_COMMIT` at the package root (one line; the image writes it from its `BUILD_COMMIT` build argument),
 * else `unknown`. A value that is not a commit hash reads `unknown` too, so a typo cannot pass for one.
 */
export function buildInfo(env: NodeJS.ProcessEnv = process.env, root = packageRoot()): BuildInfo {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version?: string };
  const stamp = join(root, 'BUILD_COMMIT');
  const given =
    env.MESH_BUILD_COMMIT?.trim() || (existsSync(stamp) ? readFileSync(stamp, 'utf8').trim() : '');
  return {
    version: typeof pkg.version === 'string' && pkg.version !== '' ? pkg.version : 'unknown',
    commit: COMMIT.test(given) ? given.toLowerCase() : 'unknown',
  };
}
