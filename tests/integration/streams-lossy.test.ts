/**
 * Streams over a lossy bus (issue 28, item 4): two nodes with `ha.streams`, their Redis behind the lossy
 * proxy dropping 30 % of the bus publishes (no disconnect, the publisher sees an ordinary reply). A
 * subscriber on the other node must never lose silently: every offset of the stream arrives, in order, or
 * is named by a `stream.gap` frame; the last publishes' loss is found by the periodic position check,
 * without a newer publish.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LossyRedisProxy } from '../../cli/proxies/lossy-redis-proxy.js';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import type { Frame } from '../../protocol/frames.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { ThrowawayRedis } from '../helpers/redis-server.js';
import { seriesValue } from '../helpers/verifier.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let dir: string;
let redis: ThrowawayRedis;
let proxy: LossyRedisProxy;
let a: TestNode;
let b: TestNode;

beforeAll(async () => {
  [db, redis] = await Promise.all([createTestDatabase('streams_lossy'), ThrowawayRedis.start()]);
  proxy = await LossyRedisProxy.start({ upstream: redis.url, channels: ':bus:', seed: 28 });
  dir = mkdtempSync(join(tmpdir(), 'wb-streams-lossy-'));
  writeFileSync(
    join(dir, 'lossy.json'),
    renderFlagsDocument({ ...defaultFlagValues(), 'ha.streams': true, 'ha.presence': true }),
  );
  const env = {
    FLAGS_DIR: dir,
    FLAGS_ENV: 'lossy',
    REDIS_URL: proxy.url,
    REDIS_KEY_PREFIX: `lossy:${randomBytes(3).toString('hex')}:`,
    FRAME_RATE_PER_SEC: '100000',
    FRAME_BURST: '100000',
    STREAM_POSITION_CHECK_MS: '300',
  };
  [a, b] = await Promise.all([
    startNode({ kind: 'in-process', databaseUrl: db.url, env: { ...env, NODE_ID: 'lossy-a' } }),
    startNode({ kind: 'in-process', databaseUrl: db.url, env: { ...env, NODE_ID: 'lossy-b' } }),
  ]);
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await a?.stop();
  await b?.stop();
  await proxy?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

type Data = Frame & { data: number; offset?: number; epoch?: string };
type Gap = Frame & { from: number; to: number; reason: string; epoch: string };

describe('streams over a bus that drops 30 % of its publishes', () => {
  it('a subscriber on another node gets every publish in order or a stream.gap naming it: no silent gap', async () => {
    const mesh = await createMesh(a, 2);
    const publisher = await connectPeer(a.wsUrl, mesh, mesh.members[0]!);
    const subscriber = await connectPeer(b.wsUrl, mesh, mesh.members[1]!);
    await subscriber.request({ type: 'stream.subscribe', stream: 'ticks' });
    const data: Data[] = [];
    const gaps: Gap[] = [];
    subscriber.on('frame', (f) => {
      if (f.type === 'stream.data') data.push(f as Data);
      if (f.type === 'stream.gap') gaps.push(f as Gap);
    });
    const before = proxy.stats().dropped;
    proxy.lossRate = 0.3;
    const count = 300;
    for (let i = 0; i < count; i++)
      await publisher.request({ type: 'stream.publish', stream: 'ticks', data: i });
    // No publish after these: the loss of the last ones must be found by the periodic check alone.
    const covered = () => new Set([...data.map((d) => d.data), ...gaps.flatMap((g) => range(g.from, g.to))]);
    await waitFor(() => covered().size >= count, {
      timeoutMs: 10_000,
      what: `every publish delivered or reported (have ${data.length} data, ${gaps.length} gaps)`,
    });
    proxy.lossRate = 0;
    const dropped = proxy.stats().dropped - before;
    console.log(`${dropped} bus publishes dropped; ${data.length} delivered, ${gaps.length} gaps`);
    expect(dropped).toBeGreaterThan(50);
    // In order, once each, offsets one apart (offset i+1 carries data i: the stream is new).
    expect(data.map((d) => d.data)).toEqual([...data.map((d) => d.data)].sort((x, y) => x - y));
    expect(new Set(data.map((d) => d.data)).size).toBe(data.length);
    for (const d of data) expect(d.offset).toBe(d.data + 1);
    expect(new Set(data.map((d) => d.epoch)).size).toBe(1);
    // The history holds every one of them: each gap was filled, none needed reporting.
    expect(data).toHaveLength(count);
    expect(gaps).toEqual([]);
    const metrics = await (await fetch(`${b.url}/metrics`)).text();
    expect(seriesValue(metrics, 'mesh_broker_stream_gaps_total', { outcome: 'recovered' })).toBeGreaterThan(
      0,
    );
  });
});

/** The offsets from..to, as the data they carry in this test (offset - 1). */
function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i - 1);
}
