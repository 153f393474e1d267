/**
 * A local cluster (`workbench up`) on a real Redis Cluster (REDIS_CLUSTER_NODES set when it starts; three
 * throw-away masters with a replica each): cluster.json records it, so what publishes "refresh now" to the
 * nodes from a shell without the variable (`flags set`, the console's flip) still reaches them on their
 * sharded channel, and a node started again joins the same cluster (docs/redis-cluster.md).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClusterFile } from '../../cli/cluster/local.js';
import { captured, runWorkbench, WORKBENCH } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
import { inOperatorDir } from '../helpers/environments.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { ThrowawayRedisCluster } from '../helpers/redis-cluster.js';
import { waitFor } from '../helpers/wait.js';

let redis: ThrowawayRedisCluster;
let client: Cluster;
let db: TestDatabase;
let cwd: string;
let cluster: ClusterFile;

beforeAll(async () => {
  redis = await ThrowawayRedisCluster.start();
  client = redis.client();
  db = await createTestDatabase('local_redis_cluster');
  cwd = mkdtempSync(join(tmpdir(), 'wb-local-redis-cluster-'));
  const up = await runWorkbench(
    ['up', '--phase', '3', '--port', '0', '--database-url', db.url],
    { ...FAST_CLUSTER, REDIS_CLUSTER_NODES: redis.nodesVariable },
    cwd,
  );
  expect(up.code, up.stderr).toBe(0);
  cluster = JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile;
}, 120_000);

afterAll(async () => {
  if (cwd) {
    await runWorkbench(['down'], {}, cwd);
    rmSync(cwd, { recursive: true, force: true });
  }
  client?.disconnect();
  await redis?.stop();
  await db?.drop();
}, 60_000);

/** How many connections listen on the cluster's flag-push channel (a sharded channel, on its slot's master). */
async function pushSubscribers(): Promise<number> {
  const channel = `${cluster.redisKeyPrefix}flags:refresh:${cluster.flagsEnv}`;
  const master = await redis.masterOfSlot(Number(await client.cluster('KEYSLOT', channel)));
  const [, count] = await redis.command(master, 'pubsub', 'shardnumsub', channel);
  return Number(count);
}

/** Commands run from another shell: nothing about Redis in their environment but what cluster.json says. */
const workbench = (...args: string[]) => runWorkbench(args, {}, cwd);

describe('a local cluster on a Redis Cluster', () => {
  it('cluster.json records REDIS_CLUSTER_NODES; every node listens on the sharded flag-push channel', async () => {
    expect(cluster.brokerEnv.REDIS_CLUSTER_NODES).toBe(redis.nodesVariable);
    await waitFor(async () => (await pushSubscribers()) === 3, { what: 'three nodes subscribed' });
  });

  it('`workbench flags set --env phase3` without the variable pushes on the cluster: every node gets it', async () => {
    const off = await workbench('flags', 'set', 'ha.mcp', 'off', '--env', 'phase3', '--actor', 'test');
    expect(off.code, off.stderr).toBe(0);
    expect(off.stdout).toContain('pushed to 3 subscribers');
    const on = await workbench('flags', 'set', 'ha.mcp', 'on', '--env', 'phase3', '--actor', 'test');
    expect(on.stdout).toContain('pushed to 3 subscribers');
  });

  it('a node started again (`workbench node start`, another shell) joins the same Redis Cluster', async () => {
    expect((await workbench('node', 'stop', 'broker-2')).code).toBe(0);
    await waitFor(async () => (await pushSubscribers()) === 2, { what: 'broker-2 unsubscribed' });
    const start = await workbench('node', 'start', 'broker-2');
    expect(start.code, start.stderr).toBe(0);
    await waitFor(async () => (await pushSubscribers()) === 3, { what: 'broker-2 subscribed again' });
  });

  it("the console's flag flip pushes on the cluster: every node gets it", async () => {
    const consoleProcess = spawn(process.execPath, [WORKBENCH, 'console', '--port', '0'], {
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const { output, exited } = captured(consoleProcess);
    try {
      const url = await waitFor(
        () => {
          if (consoleProcess.exitCode !== null) throw new Error(`workbench console exited:\n${output()}`);
          return output().match(/console: (http:\/\/127\.0\.0\.1:\d+)\//)?.[1];
        },
        { what: 'the console started' },
      );
      // As a script flips a flag: the admin token, no browser cookie.
      const flip = async (value: boolean) => {
        const response = await fetch(`${url}/api/flags`, {
          method: 'POST',
          headers: { authorization: `Bearer ${cluster.adminToken}`, 'content-type': 'application/json' },
          body: JSON.stringify({ flag: 'ha.mcp', value }),
        });
        expect(response.status).toBe(200);
        return (await response.json()) as { pushedTo?: number };
      };
      // Until its client has joined the cluster a flip reports no push (the nodes' poll is the backstop).
      await waitFor(async () => (await flip(false)).pushedTo === 3, {
        intervalMs: 200,
        what: 'a flip pushed to 3 nodes',
      });
      expect(await flip(true)).toMatchObject({ pushedTo: 3 });
    } finally {
      consoleProcess.kill('SIGTERM');
      await exited;
    }
  });

  it('`workbench up` with a bad REDIS_CLUSTER_NODES: exit 2 naming it, nothing started', async () => {
    await inOperatorDir('wb-up-bad-nodes-', async (empty) => {
      const up = await runWorkbench(
        ['up', '--phase', '3', '--port', '0', '--database-url', db.url],
        { REDIS_CLUSTER_NODES: '127.0.0.1:7000,' },
        empty,
      );
      expect(up.code).toBe(2);
      expect(up.stderr).toContain('REDIS_CLUSTER_NODES: entry 2 is empty');
      expect(existsSync(join(empty, '.workbench', 'cluster.json'))).toBe(false);
    });
  });
});
