import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { packageRoot } from '../../broker/paths.js';
import { freePort } from './ports.js';
import { createTestDatabase, type TestDatabase } from './postgres.js';
import { waitFor, within } from './wait.js';

export interface TestUnleash {
  /** The server's root (no `/api`). */
  url: string;
  /** Its database, for assertions and for what only Unleash's own store can do (see `insertToken`). */
  db: TestDatabase;
  /** With authentication on: the admin token Unleash created at its first start. */
  adminToken?: string;
  /** With authentication on: a backend (client) token per environment, created at its first start. */
  backendTokens: Record<string, string>;
  stop(): Promise<void>;
}

export interface UnleashOptions {
  /** Authentication on, with an admin token and a backend token for each of these environments. */
  authWithBackendTokens?: string[];
}

/** A token secret in Unleash's format: `<project>:<environment>.<random>`. */
export function tokenSecret(project: string, environment: string): string {
  return `${project}:${environment}.${randomBytes(16).toString('hex')}`;
}

/** A real unleash-server 8.2.0 on a free loopback port with a database of its own. */
export async function startUnleash(options: UnleashOptions = {}): Promise<TestUnleash> {
  const db: TestDatabase = await createTestDatabase('unleash');
  const name = new URL(db.url).pathname.slice(1);
  const port = await freePort();
  const auth = options.authWithBackendTokens !== undefined;
  const adminToken = auth ? tokenSecret('*', '*') : undefined;
  const backendTokens = Object.fromEntries(
    (options.authWithBackendTokens ?? []).map((environment) => [environment, tokenSecret('*', environment)]),
  );
  const env = { ...process.env };
  // unleash-server reads these itself at start (and creates the tokens while it has none yet).
  delete env.INIT_ADMIN_API_TOKENS;
  delete env.INIT_BACKEND_API_TOKENS;
  delete env.INIT_CLIENT_API_TOKENS;
  if (adminToken) env.INIT_ADMIN_API_TOKENS = adminToken;
  if (Object.keys(backendTokens).length > 0)
    env.INIT_BACKEND_API_TOKENS = Object.values(backendTokens).join(',');
  const child: ChildProcess = spawn(
    process.execPath,
    [
      join(packageRoot(), 'tests', 'helpers', 'unleash-server.cjs'),
      String(port),
      name,
      ...(auth ? ['auth'] : []),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env },
  );
  let output = '';
  child.stdout!.on('data', (chunk) => {
    output += chunk;
  });
  child.stderr!.on('data', (chunk) => {
    output += chunk;
  });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`unleash-server exited:\n${output}`);
      return fetch(`${url}/health`).then(
        (r) => r.ok,
        () => false,
      );
    },
    { timeoutMs: 90_000, intervalMs: 250, what: 'unleash-server healthy' },
  );
  return {
    url,
    db,
    adminToken,
    backendTokens,
    async stop() {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await within(exited, 5000, undefined);
      if (child.exitCode === null) child.kill('SIGKILL');
      await db.drop();
    },
  };
}
