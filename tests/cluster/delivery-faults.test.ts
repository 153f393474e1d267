import { randomUUID } from 'node:crypto';
import { MeshRequestError } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runMigrations } from '../../broker/db/migrate.js';
import type { FlagKey } from '../../flags/registry.js';
import { TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { ThrowawayPostgres } from '../helpers/pg-cluster.js';
import { stopped } from '../helpers/process.js';
import { ThrowawayRedis } from '../helpers/redis-server.js';
import { waitFor } from '../helpers/wait.js';

/**
 * Durable delivery when its dependencies fail (docs/delivery.md § How it fails): a stalled Redis holds
 * no sender (a send is accepted once committed; every Redis call on the way has a bound), and while
 * Postgres is unreachable a send gets a retryable `unavailable`, never `internal`, and nothing accepted
 * is lost.
 */
let pg: ThrowawayPostgres;
let redis: ThrowawayRedis;
let cluster: TestCluster;
const SHARED: FlagKey[] = ['ha.presence', 'ha.delivery', 'ha.rate-limits', 'ha.connection-cap'];

beforeAll(async () => {
  [pg, redis] = await Promise.all([ThrowawayPostgres.create(), ThrowawayRedis.start()]);
  await runMigrations(pg.url); // as its owner, before the nodes: brokers run no DDL
  cluster = new TestCluster(pg.url, {
    REDIS_URL: redis.url,
    SEND_BURST: '100000',
    SEND_RATE_PER_MIN: '1000000',
  });
  cluster.setFlags('faults', SHARED);
  await Promise.all(['f1', 'f2'].map((id) => cluster.start(id, 'faults')));
}, 90_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  await redis?.stop();
  pg?.destroy();
});

const ws = (id: string) => cluster.node(id).wsUrl;

describe('durable delivery under failing dependencies', () => {
  it('keeps answering senders while Redis is stalled (SIGSTOP), and delivers everything in order after', async () => {
    const mesh = await cluster.createMesh(2);
    const a = await connectPeer(ws('f1'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('f2'), mesh, mesh.members[1]!);
    const got: string[] = [];
    b.on('message', (m) => got.push(m.body));
    await a.send(mesh.members[1]!.pubkey, 'before');
    await waitFor(() => got.length === 1);

    const stall = redis.stall(3000);
    await waitFor(() => stopped(redis.pid!), { what: 'redis-server stopped (SIGSTOP landed)' });
    const latencies: number[] = [];
    let sent = 0;
    const stallEnds = Date.now() + 2500;
    while (Date.now() < stallEnds && sent < 200) {
      const started = Date.now();
      await a.send(mesh.members[1]!.pubkey, `stalled ${sent++}`);
      latencies.push(Date.now() - started);
    }
    await stall;
    const sorted = [...latencies].sort((x, y) => x - y);
    console.log(
      `sent during a 3 s Redis stall: ${sent}, latency ms p50 ${sorted[Math.floor(sorted.length / 2)]}, max ${sorted.at(-1)}`,
    );
    // The bound is REDIS_TIMEOUT_MS (250) per Redis call, once per pause of the guard; a send that waited
    // for the stall would take seconds.
    expect(sorted.at(-1)).toBeLessThan(1500);
    expect(sent).toBeGreaterThan(5);
    await waitFor(() => got.length === sent + 1, {
      timeoutMs: 15_000,
      what: 'every message after the stall',
    });
    expect(got).toEqual(['before', ...Array.from({ length: sent }, (_, i) => `stalled ${i}`)]);
  });

  it('answers `unavailable` while Postgres is down, and loses nothing it accepted', async () => {
    const mesh = await cluster.createMesh(2);
    const a = await connectPeer(ws('f1'), mesh, mesh.members[0]!);
    const b = await connectPeer(ws('f2'), mesh, mesh.members[1]!);
    const got = new Set<string>();
    b.on('message', (m) => got.add(m.body));
    const accepted: string[] = [];
    const codes = new Map<string, number>();
    let restarted = false;
    const restarting = pg.restart().finally(() => {
      restarted = true;
    });
    // Sends race the restart, one reply after the other, until it is over (the restart ends the loop, not
    // a clock): each one either is accepted (and must arrive) or fails with a clear code.
    for (let i = 0; !restarted && i < 2000; i++) {
      const body = `restart ${i}`;
      try {
        await a.request(
          { type: 'send', id: randomUUID(), to: mesh.members[1]!.pubkey, body },
          { timeoutMs: 3000 },
        );
        accepted.push(body);
      } catch (error) {
        const code = error instanceof MeshRequestError ? error.code : (error as Error).message;
        codes.set(code, (codes.get(code) ?? 0) + 1);
      }
    }
    await restarting;
    console.log(
      `during a Postgres restart: ${accepted.length} accepted, refused: ${JSON.stringify([...codes])}`,
    );
    expect(codes.get('unavailable') ?? 0).toBeGreaterThan(0);
    // Besides `unavailable`, a sender may see the SDK's own outcomes of a request cut short: `timeout` (no
    // reply within 3 s while the pool reconnects) and `closed` (its socket dropped meanwhile; it reconnects).
    // Both were seen once each in one of five fresh-clone runs, on a restart that took longer; neither may
    // lose what was accepted (below).
    const clear = new Set(['unavailable', 'timeout', 'closed']);
    expect([...codes.keys()].filter((code) => !clear.has(code))).toEqual([]);
    await waitFor(() => accepted.every((body) => got.has(body)), {
      timeoutMs: 20_000,
      what: 'every accepted message delivered',
    });
  });
});
