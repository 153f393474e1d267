/**
 * Redis is not open (issue 25, item 2): brokers reach a TLS-only redis-server (`rediss://`, certificate
 * checked against REDIS_TLS_CA_FILE) as an ACL user limited to their key prefix and channels, whose
 * password is in the URL (here also from REDIS_URL_FILE). A DM between peers on two nodes goes through;
 * the brokers' user cannot read another prefix's keys, publish on another prefix's channels, or run
 * CONFIG / FLUSHALL; a node given the wrong CA or password does not connect, says why, and prints no secret.
 * The redis-server is a throw-away one (tests never reconfigure the machine's Redis).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MeshClient } from '@mesh-broker/sdk';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { brokerAclUser, newRedisPassword } from '../../cli/cluster/redis-acl.js';
import { PHASE3_FLAGS, TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { requireBuild } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { expectConfinedToPrefix } from '../helpers/redis-confinement.js';
import { ThrowawayRedis } from '../helpers/redis-server.js';
import { selfSignedCertificate, type TestCertificate } from '../helpers/tls.js';
import { waitFor } from '../helpers/wait.js';

const SLOW = { timeout: 120_000 };
const BROKER_PASSWORD = newRedisPassword();
const ADMIN_PASSWORD = newRedisPassword();

let db: TestDatabase;
let dir: string;
let server: TestCertificate;
let wrongCa: TestCertificate;
let redis: ThrowawayRedis;
let cluster: TestCluster;
/** The test's own view of the server, as its administrator. */
let admin: Redis;

/** A client of the throw-away server over TLS, as `user`. */
function clientAs(user: string, password: string): Redis {
  return new Redis(redis.urlAs(user, password), {
    tls: { ca: readFileSync(server.caFile, 'utf8') },
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    lazyConnect: true,
  });
}

beforeAll(async () => {
  requireBuild();
  db = await createTestDatabase('redis_access');
  dir = mkdtempSync(join(tmpdir(), 'wb-redis-access-'));
  server = selfSignedCertificate(dir, 'redis');
  wrongCa = selfSignedCertificate(dir, 'other-ca');
  cluster = new TestCluster(db.url);
  redis = await ThrowawayRedis.start({
    tls: server,
    users: [
      brokerAclUser('broker', BROKER_PASSWORD, cluster.prefix),
      `user admin on >${ADMIN_PASSWORD} ~* &* +@all`,
    ],
  });
  admin = clientAs('admin', ADMIN_PASSWORD);
  await admin.connect();
  cluster.setFlags('tls', PHASE3_FLAGS);
}, 60_000);
afterAll(async () => {
  closeAllClients();
  await cluster?.stop();
  admin?.disconnect();
  await redis?.destroy();
  if (dir) rmSync(dir, { recursive: true, force: true });
  await db?.drop();
}, 60_000);

async function healthOf(url: string): Promise<{ redis: string }> {
  return (await (await fetch(`${url}/health`)).json()) as { redis: string };
}

describe('brokers on a TLS Redis with an ACL user', () => {
  it(
    'two nodes over rediss:// (one reading its URL from a file): a DM between them arrives',
    SLOW,
    async () => {
      const url = redis.urlAs('broker', BROKER_PASSWORD);
      expect(url).toMatch(/^rediss:\/\//);
      const urlFile = join(dir, 'redis-url');
      writeFileSync(urlFile, `${url}\n`, { mode: 0o600 });
      const a = await cluster.start('tls-a', 'tls', { REDIS_URL: url, REDIS_TLS_CA_FILE: server.caFile });
      const b = await cluster.start('tls-b', 'tls', {
        REDIS_URL_FILE: urlFile,
        REDIS_TLS_CA_FILE: server.caFile,
      });
      for (const node of [a, b])
        await waitFor(async () => (await healthOf(node.url)).redis === 'up', {
          timeoutMs: 15_000,
          what: `${node.nodeId} connected to Redis over TLS`,
        });
      const mesh = await cluster.createMesh(2);
      const sender: MeshClient = await connectPeer(a.wsUrl, mesh, mesh.members[0]!);
      const receiver: MeshClient = await connectPeer(b.wsUrl, mesh, mesh.members[1]!);
      const received: string[] = [];
      receiver.on('message', (message) => received.push(message.body));
      await sender.send(mesh.members[1]!.pubkey, 'over tls');
      await waitFor(() => received.includes('over tls'), { timeoutMs: 15_000, what: 'the DM on node b' });
      // The brokers wrote their shared state as the ACL user, all of it under their prefix.
      const keys = await admin.keys('*');
      expect(keys.length).toBeGreaterThan(0);
      expect(keys.filter((key) => !key.startsWith(cluster.prefix))).toEqual([]);
      for (const node of [a, b]) {
        expect(node.output()).not.toContain(BROKER_PASSWORD);
        expect(readFileSync(`/proc/${node.process.pid}/cmdline`, 'utf8')).not.toContain(BROKER_PASSWORD);
      }
    },
  );

  it("the brokers' user reaches nothing outside its prefix and runs no CONFIG or FLUSHALL", async () => {
    await admin.set('other:key', 'not yours');
    const broker = clientAs('broker', BROKER_PASSWORD);
    await broker.connect();
    try {
      await expectConfinedToPrefix(broker, cluster.prefix);
      expect(await admin.get('other:key')).toBe('not yours');
    } finally {
      broker.disconnect();
    }
    // Without a user, nothing: the default user is off.
    const anonymous = new Redis(redis.url, {
      tls: { ca: readFileSync(server.caFile, 'utf8') },
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      lazyConnect: true,
    });
    anonymous.on('error', () => {}); // NOAUTH on its ready check: what this case expects
    await anonymous.connect().catch(() => {});
    await expect(anonymous.get(`${cluster.prefix}probe`)).rejects.toThrow(/NOAUTH|NOPERM|closed/i);
    anonymous.disconnect();
  });

  it(
    'a node with the wrong CA or the wrong password does not connect, says why, prints no secret',
    SLOW,
    async () => {
      const wrong = await cluster.start('tls-wrong-ca', 'tls', {
        REDIS_URL: redis.urlAs('broker', BROKER_PASSWORD),
        REDIS_TLS_CA_FILE: wrongCa.caFile,
      });
      await waitFor(() => /certificate is not trusted/.test(wrong.output()), {
        timeoutMs: 15_000,
        what: 'a certificate error in the log',
      });
      expect((await healthOf(wrong.url)).redis).toBe('down');
      const badPassword = newRedisPassword();
      const denied = await cluster.start('tls-wrong-password', 'tls', {
        REDIS_URL: redis.urlAs('broker', badPassword),
        REDIS_TLS_CA_FILE: server.caFile,
      });
      await waitFor(
        () => /refused the credentials.*WRONGPASS|WRONGPASS.*refused the credentials/.test(denied.output()),
        {
          timeoutMs: 15_000,
          what: 'WRONGPASS in the log',
        },
      );
      expect((await healthOf(denied.url)).redis).toBe('down');
      for (const node of [wrong, denied]) {
        expect(node.output()).not.toContain(BROKER_PASSWORD);
        expect(node.output()).not.toContain(badPassword);
      }
    },
  );
});
