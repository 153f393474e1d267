import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { FlagKey } from '../../flags/registry.js';
import { TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { ThrowawayRedis } from '../helpers/redis-server.js';
import { waitFor } from '../helpers/wait.js';

/**
 * A message a node missed (accepted while delivery was per node, or published while its bus was away) must
 * reach its recipient before the sender's later messages. The periodic sweep is set to a minute here, so
 * only the ordered catch-up (when the row turns shared, after the bus reconnects) can deliver it in time.
 */
let db: TestDatabase;
let redis: ThrowawayRedis;
let cluster: TestCluster;
const SHARED: FlagKey[] = ['ha.presence', 'ha.delivery'];

beforeAll(async () => {
  [db, redis] = await Promise.all([createTestDatabase('delivery_order'), ThrowawayRedis.start()]);
  cluster = new TestCluster(db.url, { REDIS_URL: redis.url, SWEEP_MS: '60000', SWEEP_MIN_AGE_MS: '200' });
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
});
