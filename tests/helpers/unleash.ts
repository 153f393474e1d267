import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { packageRoot } from '../../broker/paths.js';
import { freePort } from './ports.js';
import { createTestDatabase, type TestDatabase } from './postgres.js';
import { waitFor } from './wait.js';

export interface TestUnleash {
  url: string;
  stop(): Promise<void>;
}

/** A real unleash-server 8.2.0 on a free loopback port with a database of its own. */
export async function startUnleash(): Promise<TestUnleash> {
  const db: TestDatabase = await createTestDatabase('unleash');
  const name = new URL(db.url).pathname.slice(1);
  const port = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    [join(packageRoot(), 'tests', 'helpers', 'unleash-server.cjs'), String(port), name],
    { stdio: ['ignore', 'pipe', 'pipe'] },
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
    async stop() {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
      await db.drop();
    },
  };
}
