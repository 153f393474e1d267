/**
 * `POST /hook/status` keeps the session id as its credential, but a request naming a session that is not
 * live creates nothing: no rate-limit key in Redis (issue 30 item 6), whatever the id, as an attacker
 * posting fresh UUIDs would.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { ThrowawayRedis } from '../helpers/redis-server.js';

let db: TestDatabase;
let dir: string;
let redis: ThrowawayRedis;
let client: Redis;
let node: TestNode;

beforeAll(async () => {
  [db, redis] = await Promise.all([createTestDatabase('hook_unknown'), ThrowawayRedis.start()]);
  dir = mkdtempSync(join(tmpdir(), 'wb-hook-'));
  writeFileSync(
    join(dir, 'hook.json'),
    renderFlagsDocument({ ...defaultFlagValues(), 'ha.rate-limits': true, 'ha.presence': true }),
  );
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      FLAGS_DIR: dir,
      FLAGS_ENV: 'hook',
      REDIS_URL: redis.url,
      REDIS_KEY_PREFIX: `hook:${randomBytes(3).toString('hex')}:`,
    },
  });
  client = new Redis(redis.url);
});
afterEach(closeAllClients);
afterAll(async () => {
  client?.disconnect();
  await node?.stop();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

const post = (sessionId: string) =>
  fetch(`${node.url}/hook/status`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ sessionId, status: 'working' }),
  });

describe('POST /hook/status for sessions that are not live', () => {
  it('answers 404 for 50 fresh session ids and stores no key in Redis for any; a live session is still limited', async () => {
    const ids = Array.from({ length: 50 }, () => randomUUID());
    const answers = await Promise.all(ids.map((id) => post(id).then((r) => r.status)));
    expect(answers).toEqual(ids.map(() => 404));
    const keys = await client.keys('*');
    expect(keys.filter((key) => ids.some((id) => key.includes(id)))).toEqual([]);

    // The live session's reports are counted (and so limited) as before.
    const mesh = await createMesh(node, 1);
    const peer = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    expect((await post(peer.sessionId)).status).toBe(200);
    expect((await client.keys('*')).some((key) => key.includes(peer.sessionId))).toBe(true);
  });
});
