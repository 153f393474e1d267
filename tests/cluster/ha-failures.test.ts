import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { FlagKey } from '../../flags/registry.js';
import { TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { ThrowawayRedis } from '../helpers/redis-server.js';
import { waitFor } from '../helpers/wait.js';

const PART1: FlagKey[] = ['ha.presence', 'ha.delivery', 'ha.connection-cap', 'ha.rate-limits', 'ha.streams'];

let db: TestDatabase;
let redis: ThrowawayRedis;
let cluster: TestCluster;

beforeAll(async () => {
  [db, redis] = await Promise.all([createTestDatabase('ha_failures'), ThrowawayRedis.start()]);
  cluster = new TestCluster(db.url, {
    REDIS_URL: redis.url,
    SEND_BURST: '1000',
    SEND_RATE_PER_MIN: '100000',
  });
  cluster.setFlags('ha', PART1);
  await Promise.all(['n1', 'n2', 'n3'].map((id) => cluster.start(id, 'ha')));
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  await redis?.stop();
  await db?.drop();
});

const ws = (id: string) => cluster.node(id).wsUrl;

describe('HA part 1 under failures', () => {
  it('delivers across nodes on the sweep alone while Redis is down, within the stated bound', async () => {
    const mesh = await cluster.createMesh(2);
    const a = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('n2'), mesh, mesh.members[1]!);
    const arrivals = new Map<string, number>();
    b.on('message', (m) => arrivals.set(m.body, Date.now()));
    await redis.stop();
    await waitFor(
      async () =>
        ((await (await fetch(`${cluster.node('n1').url}/health`)).json()) as { redis: string }).redis ===
        'down',
    );
    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      const sentAt = Date.now();
      await a.send(mesh.members[1]!.pubkey, `outage ${i}`);
      await waitFor(() => arrivals.has(`outage ${i}`), { timeoutMs: 5000 });
      delays.push(arrivals.get(`outage ${i}`)! - sentAt);
    }
    const sorted = [...delays].sort((x, y) => x - y);
    console.log(
      `cross-node delivery with Redis down (sweep only), ms: ${delays.join(', ')}; median ${sorted[2]}`,
    );
    // Bound: SWEEP_MIN_AGE_MS (200) + SWEEP_MS (300) + a query; generous here, the figure is the point.
    expect(Math.max(...delays)).toBeLessThan(3000);
    const metrics = await (await fetch(`${cluster.node('n1').url}/metrics`)).text();
    expect(metrics).toMatch(/mesh_broker_bus_publish_failures_total\{node="n1"\} [1-9]/);
    const receiving = await (await fetch(`${cluster.node('n2').url}/metrics`)).text();
    expect(receiving).toMatch(/mesh_broker_deliveries_total\{path="sweep",node="n2"\} [1-9]/);
    await redis.restart();
    await waitFor(
      async () =>
        ((await (await fetch(`${cluster.node('n1').url}/health`)).json()) as { redis: string }).redis ===
        'up',
      {
        timeoutMs: 10_000,
      },
    );
    // And back on the fast path.
    await a.send(mesh.members[1]!.pubkey, 'after');
    await waitFor(() => arrivals.has('after'));
  });

  it("reaps a killed node's sessions: survivors announce peer.left once, within the stated bound", async () => {
    const mesh = await cluster.createMesh(3);
    const watcherA = await connectPeer(ws('n1'), mesh, mesh.members[0]!);
    const watcherB = await connectPeer(ws('n2'), mesh, mesh.members[1]!);
    const doomed = await connectPeer(ws('n3'), mesh, mesh.members[2]!, { reconnect: false });
    const leftA: string[] = [];
    const leftB: string[] = [];
    watcherA.on('peer.left', (e) => leftA.push(e.sessionId));
    watcherB.on('peer.left', (e) => leftB.push(e.sessionId));
    expect((await watcherA.peers()).map((p) => p.node).sort()).toEqual(['n1', 'n2', 'n3']);
    const killedAt = Date.now();
    await cluster.kill('n3');
    await waitFor(() => leftA.includes(doomed.sessionId) && leftB.includes(doomed.sessionId), {
      timeoutMs: 10_000,
    });
    const elapsed = Date.now() - killedAt;
    console.log(`peer.left for the sessions of a SIGKILLed node after ${elapsed} ms`);
    // Bound: max(NODE_DEAD_MS 1500, grace 1000) + reaper period (HEARTBEAT_MS 500) after the last heartbeat.
    expect(elapsed).toBeLessThan(1500 + 500 + 500 + 1500);
    expect(leftA).toEqual([doomed.sessionId]);
    expect(leftB).toEqual([doomed.sessionId]);
    expect((await watcherA.peers()).map((p) => p.node).sort()).toEqual(['n1', 'n2']);
  });
});
