import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LossyRedisProxy } from '../../cli/proxies/lossy-redis-proxy.js';
import type { FlagKey } from '../../flags/registry.js';
import { TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { ThrowawayRedis } from '../helpers/redis-server.js';
import { seriesValue } from '../helpers/verifier.js';
import { waitFor } from '../helpers/wait.js';

/**
 * A message a node missed (accepted while delivery was per node, published while its bus was away, or
 * whose wake-up was silently lost) must reach its recipient before the sender's later messages. The
 * periodic check is set to a minute here, so it cannot hide a gap: only the feeds' order by seq can.
 */
let db: TestDatabase;
let redis: ThrowawayRedis;
let cluster: TestCluster;
const SHARED: FlagKey[] = ['ha.presence', 'ha.delivery'];

beforeAll(async () => {
  [db, redis] = await Promise.all([createTestDatabase('delivery_order'), ThrowawayRedis.start()]);
  cluster = new TestCluster(db.url, { REDIS_URL: redis.url, DELIVERY_CHECK_MS: '60000' });
  cluster.setFlags('order', ['ha.presence']);
  await Promise.all(['o1', 'o2'].map((id) => cluster.start(id, 'order')));
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  await redis?.stop();
  await db?.drop();
});

const ws = (id: string) => cluster.node(id).wsUrl;
const acting = async (id: string, flag: FlagKey) =>
  (
    (await (await fetch(`${cluster.node(id).url}/flags`)).json()) as {
      flags: Record<string, { acting: boolean }>;
    }
  ).flags[flag]?.acting === true;
const redisState = async (id: string) =>
  ((await (await fetch(`${cluster.node(id).url}/health`)).json()) as { redis: string }).redis;

describe('sender order across a missed wake-up', () => {
  it('a message accepted while delivery was per node comes first once the row turns shared', async () => {
    const mesh = await cluster.createMesh(2);
    const sender = await connectPeer(ws('o1'), mesh, mesh.members[0]!);
    const recipient = await connectPeer(ws('o2'), mesh, mesh.members[1]!);
    const bodies: string[] = [];
    recipient.on('message', (m) => bodies.push(m.body));
    // Per-node delivery: stored, but never handed to o2.
    await sender.send(mesh.members[1]!.pubkey, 'first');
    cluster.setFlags('order', SHARED);
    await waitFor(async () => (await acting('o1', 'ha.delivery')) && (await acting('o2', 'ha.delivery')), {
      timeoutMs: 10_000,
      what: 'ha.delivery on both nodes',
    });
    await sender.send(mesh.members[1]!.pubkey, 'second');
    await waitFor(() => bodies.length >= 2, {
      timeoutMs: 10_000,
      what: 'both messages, long before a sweep',
    });
    expect(bodies).toEqual(['first', 'second']);
  });

  it('a message published while the bus was away comes before newer ones after it reconnects', async () => {
    const mesh = await cluster.createMesh(2);
    const sender = await connectPeer(ws('o1'), mesh, mesh.members[0]!);
    const recipient = await connectPeer(ws('o2'), mesh, mesh.members[1]!);
    const bodies: string[] = [];
    recipient.on('message', (m) => bodies.push(m.body));
    await redis.stop();
    await waitFor(async () => (await redisState('o1')) === 'down' && (await redisState('o2')) === 'down', {
      timeoutMs: 10_000,
      what: 'Redis down on both nodes',
    });
    await sender.send(mesh.members[1]!.pubkey, 'during');
    await redis.restart();
    await waitFor(async () => (await redisState('o1')) === 'up' && (await redisState('o2')) === 'up', {
      timeoutMs: 10_000,
      what: 'Redis back on both nodes',
    });
    await sender.send(mesh.members[1]!.pubkey, 'after');
    await waitFor(() => bodies.length >= 2, {
      timeoutMs: 10_000,
      what: 'both messages, long before a sweep',
    });
    expect(bodies).toEqual(['during', 'after']);
  });

  it('keeps every sender order while 30 % of the wake-ups are silently lost (no disconnect)', async () => {
    const proxy = await LossyRedisProxy.start({ upstream: redis.url, channels: ':bus:', seed: 15 });
    const lossy = new TestCluster(db.url, {
      REDIS_URL: proxy.url,
      DELIVERY_CHECK_MS: '60000',
      SEND_BURST: '100000',
      SEND_RATE_PER_MIN: '1000000',
    });
    try {
      lossy.setFlags('lossy', SHARED);
      await Promise.all(['w1', 'w2'].map((id) => lossy.start(id, 'lossy')));
      const mesh = await lossy.createMesh(3);
      const senders = await Promise.all(
        [0, 1].map((i) => connectPeer(lossy.node('w1').wsUrl, mesh, mesh.members[i]!)),
      );
      const recipient = await connectPeer(lossy.node('w2').wsUrl, mesh, mesh.members[2]!);
      const bodies: string[] = [];
      recipient.on('message', (m) => bodies.push(m.body));
      proxy.lossRate = 0.3;
      const count = 150;
      await Promise.all(
        senders.map(async (sender, s) => {
          for (let i = 0; i < count; i++) await sender.send(mesh.members[2]!.pubkey, `${s}:${i}`);
        }),
      );
      // The last messages' wake-ups may be lost too; one more wake-up (loss off) reveals every gap.
      proxy.lossRate = 0;
      await senders[0]!.send(mesh.members[2]!.pubkey, 'end');
      await waitFor(() => bodies.includes('end'), { timeoutMs: 10_000, what: 'the last message' });
      const dropped = proxy.stats().dropped;
      console.log(
        `${dropped} of ${proxy.stats().publishes} bus publishes dropped; ${bodies.length} delivered`,
      );
      expect(dropped).toBeGreaterThan(30);
      // Every message once, and each sender's in send order, although a third of the hints never came.
      for (const s of [0, 1]) {
        expect(bodies.filter((b) => b.startsWith(`${s}:`))).toEqual(
          Array.from({ length: count }, (_, i) => `${s}:${i}`),
        );
      }
      expect(bodies.length).toBe(2 * count + 1);
      // The gaps were read from Postgres, not left to the (one-minute) periodic check.
      const metrics = await (await fetch(`${lossy.node('w2').url}/metrics`)).text();
      expect(
        seriesValue(metrics, 'mesh_broker_deliveries_total', { node: 'w2', path: 'backlog' }),
      ).toBeGreaterThan(0);
    } finally {
      await lossy.stop();
      await proxy.close();
    }
  });
});
