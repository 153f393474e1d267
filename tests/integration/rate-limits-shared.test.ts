import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { ThrowawayRedis } from '../helpers/redis-server.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let dir: string;
let redis: ThrowawayRedis;
let a: TestNode;
let b: TestNode;

beforeAll(async () => {
  [db, redis] = await Promise.all([createTestDatabase('rate_shared'), ThrowawayRedis.start()]);
  dir = mkdtempSync(join(tmpdir(), 'wb-rl-'));
  writeFileSync(
    join(dir, 'rl.json'),
    renderFlagsDocument({ ...defaultFlagValues(), 'ha.rate-limits': true }),
  );
  const env = {
    FLAGS_DIR: dir,
    FLAGS_ENV: 'rl',
    REDIS_URL: redis.url,
    REDIS_KEY_PREFIX: `rl:${randomBytes(3).toString('hex')}:`,
  };
  [a, b] = await Promise.all([
    startNode({ kind: 'in-process', databaseUrl: db.url, env }),
    startNode({ kind: 'in-process', databaseUrl: db.url, env }),
  ]);
});
afterEach(closeAllClients);
afterAll(async () => {
  await a?.stop();
  await b?.stop();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

async function sendMany(
  node: TestNode,
  mesh: Awaited<ReturnType<typeof createMesh>>,
  count: number,
  tag: string,
) {
  const peer = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
  const results = await Promise.allSettled(
    Array.from({ length: count }, (_, i) => peer.send(mesh.members[1]!.pubkey, 'x', { id: `${tag}-${i}` })),
  );
  return results.filter((r) => r.status === 'fulfilled').length;
}

describe('shared rate limits (ha.rate-limits on)', () => {
  it('gives a member one quota across nodes', async () => {
    const mesh = await createMesh(a, 2);
    expect(await sendMany(a, mesh, 8, 'a')).toBe(8);
    // The burst is 10 per member wherever it sends from: only 2 more through the other node.
    expect(await sendMany(b, mesh, 5, 'b')).toBe(2);
  });

  it('falls back to per-node buckets while Redis is down, says so, and goes back to shared ones', async () => {
    const mesh = await createMesh(a, 2);
    await redis.stop();
    await waitFor(
      async () => ((await (await fetch(`${a.url}/health`)).json()) as { redis: string }).redis === 'down',
    );
    // Still limited, per node: 10 through each node.
    expect(await sendMany(a, mesh, 12, 'down-a')).toBe(10);
    expect(await sendMany(b, mesh, 12, 'down-b')).toBe(10);
    const metrics = await (await fetch(`${a.url}/metrics`)).text();
    expect(metrics).toMatch(/mesh_broker_redis_fallback_total\{row="rate-limits",node="[^"]+"\} [1-9]/);
    await redis.restart();
    await waitFor(
      async () => ((await (await fetch(`${a.url}/health`)).json()) as { redis: string }).redis === 'up',
      {
        timeoutMs: 10_000,
      },
    );
    const fresh = await createMesh(a, 2);
    expect(await sendMany(a, fresh, 8, 'up-a')).toBe(8);
    expect(await sendMany(b, fresh, 5, 'up-b')).toBe(2);
  });
});
