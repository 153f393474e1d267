/**
 * `workbench up` naming no Redis runs a private redis-server of its own with an ACL user (issue 25 item 2;
 * cli/cluster/private-redis.ts), driven as a user would: the compiled CLI in a fresh folder. The server
 * refuses a client without credentials (default user off); the brokers' user, whose URL cluster.json
 * carries, reaches keys under the cluster's prefix only and runs no CONFIG or FLUSHALL; the bus works
 * under the ACL (a DM across two nodes, a `flags set` push reaching every node); no output shows the
 * password; `workbench down` stops the server and removes its configuration file.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClusterFile } from '../../cli/cluster/local.js';
import { runWorkbench } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { listening, stillRunning } from '../helpers/process.js';
import { expectConfinedToPrefix } from '../helpers/redis-confinement.js';

const SLOW = { timeout: 120_000 };
const cwd = mkdtempSync(join(tmpdir(), 'wb-up-redis-acl-'));
let db: TestDatabase;
let cluster: ClusterFile;
let upOutput: string;
const clients: Redis[] = [];

/**
 * A client of the cluster's Redis: `url` as given (with or without credentials), no retries, no ready
 * check (refused without credentials, it would close the connection before the server's answer shows).
 */
function client(url: string): Redis {
  const redis = new Redis(url, {
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    lazyConnect: true,
    enableReadyCheck: false,
  });
  redis.on('error', () => {}); // a refused ready check is what some cases expect
  clients.push(redis);
  return redis;
}

beforeAll(async () => {
  db = await createTestDatabase('up_redis_acl');
  // No REDIS_URL: the environment of a user who named no Redis (the test runner's may have one).
  const up = await runWorkbench(
    ['up', '--phase', '3', '--port', '0', '--database-url', db.url],
    { ...FAST_CLUSTER, REDIS_URL: '' },
    cwd,
  );
  expect(up.code, up.stderr).toBe(0);
  upOutput = up.stdout + up.stderr;
  cluster = JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile;
}, 120_000);

afterAll(async () => {
  for (const redis of clients) redis.disconnect();
  await runWorkbench(['down'], {}, cwd);
  rmSync(cwd, { recursive: true, force: true });
  await db?.drop();
});

describe('workbench up with no Redis named', () => {
  it('runs its own redis-server with an ACL user: its URL carries the credentials, nothing prints them', () => {
    const url = new URL(cluster.redisUrl);
    expect(url.hostname).toBe('127.0.0.1');
    expect(url.port).not.toBe('6379');
    expect(url.username).toBe('broker');
    expect(url.password).toMatch(/^[0-9a-f]{48}$/);
    expect(readFileSync(`/proc/${cluster.redisServer!.pid}/cmdline`, 'utf8')).toMatch(/redis-server/);
    // Its configuration holds the password: the owner's only, in the private folder, not on a command line.
    expect(cluster.redisServer!.configFile).toBe(join(cwd, '.workbench', 'redis.conf'));
    expect(statSync(cluster.redisServer!.configFile).mode & 0o777).toBe(0o600);
    expect(readFileSync(`/proc/${cluster.redisServer!.pid}/cmdline`, 'utf8')).not.toContain(url.password);
    expect(upOutput).toContain(`redis://broker:xxxxx@127.0.0.1:${url.port}`);
    expect(upOutput).not.toContain(url.password);
  });

  it('refuses a client without credentials: the default user is off', async () => {
    const url = new URL(cluster.redisUrl);
    const anonymous = client(`redis://127.0.0.1:${url.port}`);
    await anonymous.connect();
    await expect(anonymous.get(`${cluster.redisKeyPrefix}x`)).rejects.toThrow(/NOAUTH/);
    await expect(anonymous.call('AUTH', 'default', '')).rejects.toThrow(/WRONGPASS|disabled/);
  });

  it("the brokers' user reaches keys under the prefix only and runs no CONFIG or FLUSHALL", async () => {
    const broker = client(cluster.redisUrl);
    await broker.connect();
    await expectConfinedToPrefix(broker, cluster.redisKeyPrefix);
  });

  it(
    "the bus works under the ACL: a DM across two nodes, and the CLI's flags push reaches every node",
    SLOW,
    async () => {
      const smoke = await runWorkbench(['smoke', '--phase', '3', '--only', 'cross-node-dm'], {}, cwd);
      expect(smoke.code, smoke.stdout + smoke.stderr).toBe(0);
      expect(smoke.stdout).toMatch(/pass\s+cross-node-dm/);
      const set = await runWorkbench(
        ['flags', 'set', 'ha.watches', 'off', '--env', cluster.flagsEnv],
        {},
        cwd,
      );
      expect(set.code, set.stdout + set.stderr).toBe(0);
      expect(set.stdout).toContain(`pushed to ${cluster.nodes.length} subscribers`);
      expect(set.stdout + set.stderr).not.toContain(new URL(cluster.redisUrl).password);
    },
  );

  it('workbench down stops the server and removes its configuration', SLOW, async () => {
    const { pid, configFile } = cluster.redisServer!;
    const port = Number(new URL(cluster.redisUrl).port);
    const down = await runWorkbench(['down'], {}, cwd);
    expect(down.code, down.stderr).toBe(0);
    expect(await stillRunning([pid, ...cluster.nodes.map((n) => n.pid)])).toEqual([]);
    expect(await listening(port)).toBe(false);
    expect(existsSync(configFile)).toBe(false);
  });
});
