/**
 * No secret in what a node shows (issue 25, item 2): a broker process whose REDIS_URL and DATABASE_URL carry
 * passwords, with Redis and then Postgres failing, must not print either password on stdout or stderr (at
 * debug level, where every Redis error is logged), nor serve it on /health, nor show it on its command line
 * (/proc/<pid>/cmdline, what `ps` prints); a bad URL is refused without echoing it. Each case runs
 * `workbench broker` as its own process.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../../cli/cluster/broker-process.js';
import { ADMIN_TOKEN, captured, requireBuild } from '../helpers/nodes.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const REDIS_PASSWORD = `redis-pw-${randomBytes(8).toString('hex')}`;
const PG_PASSWORD = `pg-pw-${randomBytes(8).toString('hex')}`;
const SLOW = { timeout: 90_000 };

let db: TestDatabase;
const started: BrokerProcess[] = [];

beforeAll(async () => {
  requireBuild();
  db = await createTestDatabase('secret_leaks');
});
afterAll(async () => {
  for (const broker of started) broker.kill();
  await db?.drop();
});

/** The test database's URL with a password in it (the machine's Postgres trusts loopback: it is ignored). */
function databaseUrlWithPassword(url: string, port?: number): string {
  const parsed = new URL(url);
  parsed.password = PG_PASSWORD;
  if (port !== undefined) parsed.port = String(port);
  return parsed.toString();
}

async function spawnBroker(env: Record<string, string>) {
  const port = await freePort();
  const broker = BrokerProcess.spawn({
    port,
    env: {
      NODE_ID: `leak-${port}`,
      ADMIN_TOKEN,
      REDIS_KEY_PREFIX: `wbtest:leak-${port}:`,
      LOG_LEVEL: 'debug',
      ...env,
    },
    output: 'pipe',
  });
  started.push(broker);
  return { broker, ...captured(broker.child) };
}

function expectNoPassword(text: string): void {
  expect(text).not.toContain(REDIS_PASSWORD);
  expect(text).not.toContain(PG_PASSWORD);
}

describe('secrets in what a broker shows', () => {
  it('Redis unreachable: no password in the log, /health or the command line', SLOW, async () => {
    const closedPort = await freePort();
    const { broker, output } = await spawnBroker({
      DATABASE_URL: databaseUrlWithPassword(db.url),
      REDIS_URL: `redis://broker:${REDIS_PASSWORD}@127.0.0.1:${closedPort}`,
      REDIS_COUNTERS_URL: `redis://broker:${REDIS_PASSWORD}x@127.0.0.1:${closedPort}`,
    });
    await broker.waitHealthy(60_000);
    // Several reconnect attempts logged (each with ioredis's error), so the test sees what they print.
    await waitFor(() => output().split('redis error').length > 3, {
      timeoutMs: 20_000,
      what: 'redis errors in the log',
    });
    const health = await (await fetch(`${broker.url}/health`)).text();
    const cmdline = readFileSync(`/proc/${broker.pid}/cmdline`, 'utf8');
    expect(output()).toContain('ECONNREFUSED');
    expectNoPassword(output());
    expectNoPassword(health);
    expectNoPassword(cmdline);
    await broker.stop();
  });

  it('Postgres unreachable: the start fails naming the database, never its password', SLOW, async () => {
    const closedPort = await freePort();
    const { output, exited } = await spawnBroker({
      DATABASE_URL: databaseUrlWithPassword(db.url, closedPort),
      REDIS_URL: `redis://broker:${REDIS_PASSWORD}@127.0.0.1:${closedPort}`,
      STARTUP_DB_WAIT_MS: '500',
    });
    expect(await exited).toBe(1);
    expect(output()).toContain(`127.0.0.1:${closedPort}`);
    expectNoPassword(output());
  });

  it('a bad URL is refused without echoing it', SLOW, async () => {
    const { output, exited } = await spawnBroker({
      DATABASE_URL: databaseUrlWithPassword(db.url),
      REDIS_URL: `redis://broker:${REDIS_PASSWORD}@127.0.0.1:notaport`,
    });
    expect(await exited).toBe(2);
    expect(output()).toContain('REDIS_URL');
    expectNoPassword(output());
  });
});
