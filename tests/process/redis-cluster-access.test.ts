/**
 * A Redis Cluster is not open either (issue 25, item 2, "same for a Redis Cluster"): brokers reach a
 * throw-away six-node Redis Cluster (three masters, a replica each) whose `default` user is off, as the
 * brokers' ACL user (REDIS_CLUSTER_USERNAME, REDIS_CLUSTER_PASSWORD, or its _FILE), first in the clear, then
 * with every node TLS-only (REDIS_CLUSTER_TLS, REDIS_TLS_CA_FILE). A DM between peers on two nodes goes
 * through the cluster; every node refuses a client without the password or with a wrong one; the brokers'
 * user reaches no key or channel outside its prefix and runs no CONFIG, FLUSHALL, KEYS or ACL; a node with
 * the wrong password or CA does not connect and says why; no password is in a node's log, /health or
 * command line. The Redis Clusters are throw-away ones (cli/cluster/redis-cluster.ts).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { brokerAclUser, newRedisPassword } from '../../cli/cluster/redis-acl.js';
import type { NodeProcess } from '../helpers/cli.js';
import { PHASE3_FLAGS, TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { requireBuild } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { ThrowawayRedisCluster } from '../helpers/redis-cluster.js';
import { expectConfinedToPrefix } from '../helpers/redis-confinement.js';
import { selfSignedCertificate, type TestCertificate } from '../helpers/tls.js';
import { waitFor } from '../helpers/wait.js';

const SLOW = { timeout: 60_000 };
const BROKER_PASSWORD = newRedisPassword();
const WRONG_PASSWORD = newRedisPassword();
const BROKER = { username: 'broker', password: BROKER_PASSWORD };

let db: TestDatabase;
let dir: string;

beforeAll(async () => {
  requireBuild();
  db = await createTestDatabase('redis_cluster_access');
  dir = mkdtempSync(join(tmpdir(), 'wb-redis-cluster-access-'));
}, 30_000);
afterAll(async () => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  await db?.drop();
}, 30_000);

async function healthText(node: NodeProcess): Promise<string> {
  return (await fetch(`${node.url}/health`)).text();
}

async function redisHealth(node: NodeProcess): Promise<string> {
  return ((await (await fetch(`${node.url}/health`)).json()) as { redis: string }).redis;
}

/** Neither password in the node's output, /health or command line (what `ps` shows). */
async function expectNoPassword(node: NodeProcess): Promise<void> {
  const shown = [
    node.output(),
    await healthText(node),
    readFileSync(`/proc/${node.process.pid}/cmdline`, 'utf8'),
  ];
  for (const text of shown) {
    expect(text).not.toContain(BROKER_PASSWORD);
    expect(text).not.toContain(WRONG_PASSWORD);
  }
}

/** One connection to one node of `redis` (not a cluster client: each node is asked on its own). */
function nodeClient(
  redis: ThrowawayRedisCluster,
  port: number,
  user?: { username: string; password: string },
) {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    ...redis.connectionOptions(),
    // Without `user`: no credentials at all, even the administrator's that connectionOptions() carries.
    username: user?.username,
    password: user?.password,
    // Each command's own answer (NOAUTH), not the ready check's INFO failing first.
    enableReadyCheck: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    lazyConnect: true,
  });
  client.on('error', () => {}); // NOAUTH / WRONGPASS on the ready check: what the refusal cases expect
  return client;
}

/** Two nodes on the cluster (the second reading its password from a file): a DM between them arrives. */
async function dmAcrossTwoNodes(
  redis: ThrowawayRedisCluster,
  cluster: TestCluster,
  env: Record<string, string>,
  tag: string,
) {
  const passwordFile = join(dir, `${tag}-password`);
  writeFileSync(passwordFile, `${BROKER_PASSWORD}\n`, { mode: 0o600 });
  const a = await cluster.start(`${tag}-a`, 'ha', { ...env, REDIS_CLUSTER_PASSWORD: BROKER_PASSWORD });
  const b = await cluster.start(`${tag}-b`, 'ha', { ...env, REDIS_CLUSTER_PASSWORD_FILE: passwordFile });
  for (const node of [a, b])
    await waitFor(async () => (await redisHealth(node)) === 'up', {
      timeoutMs: 15_000,
      what: `${node.nodeId} connected to the Redis Cluster`,
    });
  const mesh = await cluster.createMesh(2, a);
  const sender = await connectPeer(a.wsUrl, mesh, mesh.members[0]!);
  const receiver = await connectPeer(b.wsUrl, mesh, mesh.members[1]!);
  const received: string[] = [];
  receiver.on('message', (message) => received.push(message.body));
  await sender.send(mesh.members[1]!.pubkey, `over the ${tag} cluster`);
  await waitFor(() => received.includes(`over the ${tag} cluster`), {
    timeoutMs: 15_000,
    what: 'the DM on node b',
  });
  closeAllClients();
  await expectBrokersOnEveryMaster(redis, cluster.prefix);
  return [a, b];
}

/**
 * Every master holds connections as the brokers' user (main and sharded subscriber clients, of both nodes)
 * and none unauthenticated (`default`): the clients authenticated on each node they were sent to, not only
 * on the seed they started from; and the brokers' sharded subscriptions are on the masters.
 */
async function expectBrokersOnEveryMaster(redis: ThrowawayRedisCluster, prefix: string): Promise<void> {
  const masters = (await redis.nodes()).filter((node) => node.role === 'master');
  expect(masters).toHaveLength(3);
  let channels = 0;
  for (const { port } of masters) {
    channels += (await redis.command(port, 'pubsub', 'shardchannels', `${prefix}*`)).length;
    // A connection is listed as `default` until its AUTH is through, so one that is connecting at this
    // moment (a reconnect, a slot refresh's new link) shows for a few ms: wait for a listing without one.
    // A client that never authenticates keeps it, and fails here.
    const users = await waitFor(
      async () => {
        const listed = (await redis.command(port, 'client', 'list')).map(
          (line) => line.match(/ user=(\S+)/)?.[1],
        );
        return listed.includes('default') ? undefined : listed;
      },
      { what: `no unauthenticated client on master :${port}` },
    );
    expect(users).toContain('broker');
  }
  expect(channels).toBeGreaterThan(0);
}

/** The cluster's seed variables for a node, the password left to the caller. */
function clusterEnv(redis: ThrowawayRedisCluster, extra: Record<string, string> = {}) {
  return { REDIS_CLUSTER_NODES: redis.nodesVariable, REDIS_CLUSTER_USERNAME: 'broker', ...extra };
}

describe('brokers on a Redis Cluster with an ACL user', () => {
  let redis: ThrowawayRedisCluster;
  let cluster: TestCluster;

  beforeAll(async () => {
    cluster = new TestCluster(db.url);
    cluster.setFlags('ha', PHASE3_FLAGS);
    redis = await ThrowawayRedisCluster.start({
      users: [brokerAclUser('broker', BROKER_PASSWORD, cluster.prefix)],
    });
  }, 60_000);
  afterAll(async () => {
    closeAllClients();
    await cluster?.stop();
    await redis?.stop();
  }, 30_000);

  it(
    'two nodes: a DM between them crosses the cluster; their keys are all under their prefix',
    SLOW,
    async () => {
      const nodes = await dmAcrossTwoNodes(redis, cluster, clusterEnv(redis), 'acl');
      const keys = await redis.keys('*');
      expect(keys.length).toBeGreaterThan(0);
      expect(keys.filter((key) => !key.startsWith(cluster.prefix))).toEqual([]);
      for (const node of nodes) await expectNoPassword(node);
    },
  );

  it('every node refuses a client without the password or with a wrong one', async () => {
    for (const { port } of redis.seedNodes) {
      const right = nodeClient(redis, port, BROKER);
      await right.connect();
      expect(await right.ping()).toBe('PONG'); // the node answers: what follows is refused for the credentials
      right.disconnect();
      const anonymous = nodeClient(redis, port);
      await anonymous.connect().catch(() => {});
      await expect(anonymous.get(`${cluster.prefix}probe`)).rejects.toThrow(/NOAUTH/);
      // A wrong password is refused, and the connection stays as unauthenticated as before.
      await expect(anonymous.call('AUTH', 'broker', WRONG_PASSWORD)).rejects.toThrow(/WRONGPASS/);
      await expect(anonymous.get(`${cluster.prefix}probe`)).rejects.toThrow(/NOAUTH/);
      anonymous.disconnect();
    }
  });

  it("the brokers' user reaches nothing outside its prefix and runs no CONFIG, FLUSHALL, KEYS or ACL", async () => {
    const admin = redis.client();
    const broker = redis.client(BROKER);
    try {
      await admin.set('other:key', 'not yours');
      await expectConfinedToPrefix(broker, cluster.prefix);
      expect(await admin.get('other:key')).toBe('not yours');
    } finally {
      admin.disconnect();
      broker.disconnect();
    }
  });

  it('a node with the wrong password does not connect, says why, prints no password', SLOW, async () => {
    const denied = await cluster.start('acl-wrong-password', 'ha', {
      ...clusterEnv(redis),
      REDIS_CLUSTER_PASSWORD: WRONG_PASSWORD,
    });
    await waitFor(
      () => /refused the credentials/.test(denied.output()) && /WRONGPASS/.test(denied.output()),
      {
        timeoutMs: 15_000,
        what: 'WRONGPASS in the log',
      },
    );
    expect(await redisHealth(denied)).toBe('down');
    await expectNoPassword(denied);
  });
});

describe('brokers on a TLS-only Redis Cluster with an ACL user', () => {
  let redis: ThrowawayRedisCluster;
  let cluster: TestCluster;
  let server: TestCertificate;
  let wrongCa: TestCertificate;

  beforeAll(async () => {
    server = selfSignedCertificate(dir, 'redis-cluster');
    wrongCa = selfSignedCertificate(dir, 'other-ca');
    cluster = new TestCluster(db.url);
    cluster.setFlags('ha', PHASE3_FLAGS);
    redis = await ThrowawayRedisCluster.start({
      users: [brokerAclUser('broker', BROKER_PASSWORD, cluster.prefix)],
      tls: server,
    });
  }, 60_000);
  afterAll(async () => {
    closeAllClients();
    await cluster?.stop();
    await redis?.stop();
  }, 30_000);

  it('two nodes over TLS: a DM between them crosses the cluster', SLOW, async () => {
    const env = clusterEnv(redis, { REDIS_CLUSTER_TLS: 'true', REDIS_TLS_CA_FILE: server.caFile });
    for (const node of await dmAcrossTwoNodes(redis, cluster, env, 'tls')) await expectNoPassword(node);
  });

  it('no node answers in the clear; a node with another CA does not connect and says why', SLOW, async () => {
    for (const { port } of redis.seedNodes) {
      // The right credentials, but no TLS: the node takes the clear text for a bad handshake and hangs up.
      const plain = new Redis({
        host: '127.0.0.1',
        port,
        ...BROKER,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
        lazyConnect: true,
        connectTimeout: 2000,
      });
      plain.on('error', () => {});
      await expect(plain.connect()).rejects.toThrow();
      plain.disconnect();
    }
    const wrong = await cluster.start('tls-wrong-ca', 'ha', {
      ...clusterEnv(redis, { REDIS_CLUSTER_TLS: 'true', REDIS_TLS_CA_FILE: wrongCa.caFile }),
      REDIS_CLUSTER_PASSWORD: BROKER_PASSWORD,
    });
    await waitFor(() => /certificate is not trusted/.test(wrong.output()), {
      timeoutMs: 15_000,
      what: 'a certificate error in the log',
    });
    expect(await redisHealth(wrong)).toBe('down');
    await expectNoPassword(wrong);
  });
});
