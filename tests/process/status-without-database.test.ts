/**
 * `workbench status` when Postgres goes away under a running cluster, as an operator meets it: two real
 * broker processes on a throw-away PostgreSQL server, which the test then stops. Status still lists each
 * node's health (their /health answers 503 `unavailable`, `db: down`), says the database is unreachable
 * and why, and exits 1; `--json` is JSON with the same, never a bare error.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { runWorkbench } from '../helpers/cli.js';
import { type ProcessNode, startNode } from '../helpers/nodes.js';
import { ThrowawayPostgres } from '../helpers/pg-cluster.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let server: ThrowawayPostgres;
let db: TestDatabase;
let here: string;
const nodes: ProcessNode[] = [];

beforeAll(async () => {
  server = await ThrowawayPostgres.create();
  db = await createTestDatabase('status_no_db', server.url);
  // A local cluster of two brokers on that database, acting on the local environment's flags file.
  here = mkdtempSync(join(tmpdir(), 'wb-status-no-db-'));
  const flagsDir = join(here, '.workbench', 'flags');
  mkdirSync(flagsDir, { recursive: true });
  writeFileSync(
    join(flagsDir, 'local.json'),
    readFileSync(join(packageRoot(), 'flags', 'environments', 'local.json')),
  );
  for (const id of ['broker-1', 'broker-2']) {
    nodes.push(
      await startNode({
        kind: 'process',
        databaseUrl: db.url,
        env: {
          NODE_ID: `${id}-${process.pid}`,
          FLAGS_DIR: flagsDir,
          FLAGS_ENV: 'local',
        },
      }),
    );
  }
  writeFileSync(
    join(here, '.workbench', 'cluster.json'),
    JSON.stringify({
      phase: 3,
      flagsEnv: 'local',
      flagsDir,
      lb: { url: `http://127.0.0.1:${await freePort()}`, pid: 0, kind: 'haproxy' },
      nodes: nodes.map((node, i) => ({ id: `broker-${i + 1}`, url: node.url, pid: node.process.pid })),
      databaseUrl: db.url,
      adminToken: 'a-long-enough-admin-token',
      redisUrl: 'redis://127.0.0.1:6379',
      redisKeyPrefix: `wbtest:status-no-db-${process.pid}:`,
    }),
  );
}, 120_000);

afterAll(async () => {
  // SIGKILL: a broker whose database is gone has nothing left to drain to it.
  await Promise.all(
    nodes.map((node) => {
      node.process.kill('SIGKILL');
      return node.exited;
    }),
  );
  server?.destroy(); // the test database goes with its server
  if (here) rmSync(here, { recursive: true, force: true });
});

describe('workbench status without Postgres', () => {
  it('lists each node (503 unavailable, db down), says the database is unreachable, exits 1; --json too', async () => {
    const healthy = await runWorkbench(['status'], {}, here);
    expect(healthy.code, healthy.stdout + healthy.stderr).toBe(0);
    expect(healthy.stdout).toContain('audit chains:');
    const healthyJson = JSON.parse((await runWorkbench(['status', '--json'], {}, here)).stdout);
    expect(healthyJson.database).toEqual({ reachable: true });
    expect(healthyJson.phase).toBe(3);

    server.stop();
    for (const node of nodes) {
      await waitFor(async () => (await fetch(`${node.url}/health`)).status === 503, {
        timeoutMs: 15_000,
        what: `${node.nodeId} /health 503`,
      });
    }

    const text = await runWorkbench(['status'], {}, here);
    expect(text.code, text.stdout + text.stderr).toBe(1);
    expect(text.stdout).toContain('phase unknown (local)');
    expect(text.stdout).toMatch(/broker-1\s+unavailable\s+background \S+\s+flags as desired {2}db down/);
    expect(text.stdout).toMatch(/broker-2\s+unavailable\s+background \S+\s+flags as desired {2}db down/);
    expect(text.stdout).toMatch(
      /database: UNREACHABLE \(.*ECONNREFUSED.*\): phase, ownership and audit chains unknown/,
    );
    expect(text.stdout).not.toContain('audit chains:');
    expect(text.stderr).toBe('');

    const json = await runWorkbench(['status', '--json'], {}, here);
    expect(json.code).toBe(1);
    expect(json.stderr).toBe('');
    const status = JSON.parse(json.stdout);
    expect(
      status.nodes.map((n: { id: string; health: string; db: string }) => [n.id, n.health, n.db]),
    ).toEqual([
      ['broker-1', 'unavailable', 'down'],
      ['broker-2', 'unavailable', 'down'],
    ]);
    expect(status.database).toEqual({ reachable: false, error: expect.stringContaining('ECONNREFUSED') });
    expect(status).toMatchObject({ phase: null, ownership: null, chains: null, environment: 'local' });
  }, 120_000);
});
