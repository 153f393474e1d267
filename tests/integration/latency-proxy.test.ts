/**
 * The latency proxy in front of the machine's real Postgres and Redis: their wire protocols (startup,
 * large results, pipelines) survive the delay byte for byte, the delay shows in every round trip, and a
 * cut link stalls a query until it is restored. tests/unit/latency-proxy.test.ts covers the proxy itself.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { LatencyProxy } from '../../cli/proxies/latency-proxy.js';
import { waitFor } from '../helpers/wait.js';

const POSTGRES = { host: '127.0.0.1', port: 5432 };
const REDIS = { host: '127.0.0.1', port: 6379 };
const PREFIX = `wb_test_latency_${randomBytes(4).toString('hex')}:`;
const DELAY_MS = 20;
const SLACK_MS = 200;

const proxies: LatencyProxy[] = [];
const closers: Array<() => Promise<unknown>> = [];

afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => {});
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

async function proxy(upstream: { host: string; port: number }, delayMs = DELAY_MS): Promise<LatencyProxy> {
  const started = await LatencyProxy.start({ upstream, delayMs, jitterMs: 5, seed: 2 });
  proxies.push(started);
  return started;
}

async function timed<T>(work: () => Promise<T>): Promise<[T, number]> {
  const started = performance.now();
  const value = await work();
  return [value, performance.now() - started];
}

describe('latency proxy in front of Postgres', () => {
  it('connects, answers queries a round trip later, and carries a large result intact', async () => {
    const p = await proxy(POSTGRES);
    const client = new pg.Client({ host: '127.0.0.1', port: p.port, user: 'postgres', database: 'postgres' });
    closers.push(() => client.end());
    await client.connect();
    const [result, ms] = await timed(() => client.query('SELECT 1 AS one'));
    expect(result.rows).toEqual([{ one: 1 }]);
    expect(ms).toBeGreaterThanOrEqual(2 * DELAY_MS);
    expect(ms).toBeLessThan(2 * (DELAY_MS + 5) + SLACK_MS);
    // Several MB back through the proxy, split into many chunks: every row, in order.
    const big = await client.query<{ n: number; pad: string }>(
      'SELECT n, repeat(md5(n::text), 4) AS pad FROM generate_series(1, 50000) AS n ORDER BY n',
    );
    expect(big.rows).toHaveLength(50_000);
    expect(big.rows.every((row, i) => row.n === i + 1 && row.pad.length === 128)).toBe(true);
    expect(p.stats().bytesToClient).toBeGreaterThan(50_000 * 128);
  });

  it('a query sent while the link is cut waits for restore()', async () => {
    const p = await proxy(POSTGRES);
    const client = new pg.Client({ host: '127.0.0.1', port: p.port, user: 'postgres', database: 'postgres' });
    closers.push(() => client.end());
    await client.connect();
    p.cut();
    let answered = false;
    const query = client.query('SELECT 42 AS answer').then((result) => {
      answered = true;
      return result;
    });
    // The query is in the proxy, held; then the same query through a witness proxy of the same delay is
    // answered: had the cut link let the held one through, it would have been answered by now as well.
    await waitFor(() => p.stats().bufferedBytes > 0, { what: 'the query held by the proxy' });
    const witness = new pg.Client({
      host: '127.0.0.1',
      port: (await proxy(POSTGRES)).port,
      user: 'postgres',
      database: 'postgres',
    });
    closers.push(() => witness.end());
    await witness.connect();
    expect((await witness.query('SELECT 42 AS answer')).rows).toEqual([{ answer: 42 }]);
    expect(answered).toBe(false);
    p.restore();
    expect((await query).rows).toEqual([{ answer: 42 }]);
  });
});

describe('latency proxy in front of Redis', () => {
  it('commands and a pipeline go through with the delay, replies in order', async () => {
    const p = await proxy(REDIS);
    const redis = new Redis({
      host: '127.0.0.1',
      port: p.port,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    closers.push(async () => {
      await redis.del(`${PREFIX}counter`, `${PREFIX}value`);
      redis.disconnect();
    });
    const [, ms] = await timed(() => redis.set(`${PREFIX}value`, 'through the proxy'));
    expect(ms).toBeGreaterThanOrEqual(2 * DELAY_MS);
    expect(await redis.get(`${PREFIX}value`)).toBe('through the proxy');
    // 500 pipelined INCRs: one round trip, and the replies in command order.
    const pipeline = redis.pipeline();
    for (let i = 0; i < 500; i++) pipeline.incr(`${PREFIX}counter`);
    const [replies, pipelineMs] = await timed(() => pipeline.exec());
    expect(replies!.map(([, value]) => value)).toEqual(Array.from({ length: 500 }, (_, i) => i + 1));
    expect(pipelineMs).toBeLessThan(2 * (DELAY_MS + 5) + SLACK_MS);
  });

  it('a cut link stalls commands; restore() delivers them', async () => {
    const p = await proxy(REDIS);
    const redis = new Redis({
      host: '127.0.0.1',
      port: p.port,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    closers.push(async () => redis.disconnect());
    expect(await redis.ping()).toBe('PONG');
    p.cut();
    let answered = false;
    const ping = redis.ping('held').then((reply) => {
      answered = true;
      return reply;
    });
    // The command is in the proxy, held; then the same command through a witness proxy of the same delay
    // is answered: had the cut link let the held one through, it would have been answered by now as well.
    await waitFor(() => p.stats().bufferedBytes > 0, { what: 'the command held by the proxy' });
    const witness = new Redis({
      host: '127.0.0.1',
      port: (await proxy(REDIS)).port,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    closers.push(async () => witness.disconnect());
    expect(await witness.ping('held')).toBe('held');
    expect(answered).toBe(false);
    p.restore();
    expect(await ping).toBe('held');
  });
});
