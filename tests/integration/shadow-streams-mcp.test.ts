/**
 * Shadow mode of `ha.streams` and `ha.mcp` (docs/streams.md § Shadow, docs/mcp.md § Shadow, issue 27 item 3)
 * through two real nodes of one cluster, real WebSocket peers, real Postgres and Redis, both rows at
 * "shadow": each node serves from its local implementation, what it answers is compared with what the
 * shared implementation would answer on the shadow copy (Redis keys under `shadow:`), and normal traffic on
 * one node agrees. The local gap, made with real peers, is a counted mismatch: a session that subscribed on
 * the other node and reconnected here is missed by a local publish (the shared start brings its
 * subscriptions along); a call made on the node without the server is `not_found` locally and routed by
 * the shared registry. The live state is untouched: no `stream_subscriptions` or `mcp_servers` row.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MeshClient } from '@mesh-broker/sdk';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ShadowReport } from '../../broker/shadow/runner.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNodes } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let dir: string;
let redis: Redis;
let a: InProcessNode;
let b: InProcessNode;
const prefix = `wbtest:shadow2:${randomBytes(4).toString('hex')}:`;

async function report(node: InProcessNode, flag: string): Promise<ShadowReport> {
  const response = await node.admin('/admin/shadow');
  expect(response.status).toBe(200);
  const { rows } = (await response.json()) as { rows: ShadowReport[] };
  const row = rows.find((r) => r.flag === flag);
  if (!row) throw new Error(`no shadow row for ${flag}`);
  return row;
}

/** The row's report once `done` holds for it. */
function reportWhen(node: InProcessNode, flag: string, done: (row: ShadowReport) => boolean, what: string) {
  return waitFor(
    async () => {
      const row = await report(node, flag);
      return done(row) ? row : undefined;
    },
    { timeoutMs: 10_000, what },
  );
}

async function liveRows(table: 'stream_subscriptions' | 'mcp_servers'): Promise<number> {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    return (await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]!.n;
  } finally {
    await client.end();
  }
}

beforeAll(async () => {
  db = await createTestDatabase('shadow_streams_mcp');
  dir = mkdtempSync(join(tmpdir(), 'wb-shadow2-'));
  writeFileSync(
    join(dir, 'shadow.json'),
    `${JSON.stringify({ flags: { 'ha.streams': 'shadow', 'ha.mcp': 'shadow' } })}\n`,
  );
  redis = new Redis('redis://127.0.0.1:6379');
  const nodes = await startNodes({
    kind: 'in-process',
    count: 2,
    databaseUrl: db.url,
    env: { FLAGS_DIR: dir, FLAGS_ENV: 'shadow', FLAGS_POLL_MS: '200', REDIS_KEY_PREFIX: prefix },
  });
  a = nodes[0]!;
  b = nodes[1]!;
  for (const node of [a, b])
    for (const flag of ['ha.streams', 'ha.mcp'])
      await reportWhen(node, flag, (row) => row.running, `${node.nodeId}: ${flag} comparing`);
});
afterEach(closeAllClients);
afterAll(async () => {
  await a?.stop();
  await b?.stop();
  const keys = await redis.keys(`${prefix}*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

const subscribe = (peer: MeshClient, stream: string) => peer.request({ type: 'stream.subscribe', stream });
const publish = (peer: MeshClient, stream: string, data: unknown) =>
  peer.request({ type: 'stream.publish', stream, data });

describe('shadow mode of ha.streams', () => {
  it('agrees on one node, reports a session whose subscription came from the other node, writes no live row', async () => {
    const mesh = await createMesh(a, 3);
    const [publisher, reader, roamer] = mesh.members;
    const pub = await connectPeer(a.wsUrl, mesh, publisher!);
    const sub = await connectPeer(a.wsUrl, mesh, reader!);
    await subscribe(sub, 'news');
    for (let i = 0; i < 3; i++) {
      const got = sub.next('frame', (f) => f.type === 'stream.data');
      await publish(pub, 'news', { i });
      // Served locally: the subscriber here gets each publish.
      expect(await got).toMatchObject({ stream: 'news', data: { i } });
    }
    const agreed = await reportWhen(a, 'ha.streams', (row) => row.agree >= 3, 'three publishes compared');
    expect(agreed).toMatchObject({ disagree: 0, error: 0, mismatches: [] });
    const metrics = await (await fetch(`${a.url}/metrics`)).text();
    expect(metrics).toMatch(
      /mesh_broker_shadow_comparisons_total\{flag="ha.streams",outcome="agree"[^}]*\} [3-9]/,
    );

    // The roamer subscribes on node b, leaves it and comes back (same session, inside its grace) on node a.
    const away = await connectPeer(b.wsUrl, mesh, roamer!);
    await subscribe(away, 'news');
    const copyKey = `${prefix}shadow:streams:${mesh.meshId}:${away.sessionId}`;
    await waitFor(async () => (await redis.smembers(copyKey)).includes('news'), {
      what: "node b's subscription in the shadow copy",
    });
    away.close();
    const back = await connectPeer(a.wsUrl, mesh, roamer!, { sessionId: away.sessionId });
    expect(back.sessionId).toBe(away.sessionId);
    // The shared start on a reads the copy (observed after the hello); then a publish here misses the roamer.
    await publish(pub, 'news', { i: 'gap' });
    const gap = await reportWhen(a, 'ha.streams', (row) => row.disagree >= 1, 'the roamer missed');
    const mismatch = gap.mismatches.at(-1)!;
    expect(mismatch).toMatchObject({ subject: 'publish news', outcome: 'disagree' });
    expect(mismatch.local).toEqual([sub.sessionId]);
    expect(mismatch.shared).toEqual([sub.sessionId, back.sessionId].sort());

    // The live state: no row of the shared implementation; nothing outside the copy under streams.
    expect(await liveRows('stream_subscriptions')).toBe(0);
    const keys = await redis.keys(`${prefix}*streams:*`);
    expect(keys.length).toBeGreaterThan(0);
    expect(keys.filter((key) => !key.startsWith(`${prefix}shadow:`))).toEqual([]);
  }, 60_000);
});

describe('shadow mode of ha.mcp', () => {
  const tools = [{ name: 'add', description: 'adds', inputSchema: { type: 'object' } }];

  it('agrees on one node, reports a call and a list made on the node without the server, writes no live row', async () => {
    const mesh = await createMesh(a, 3);
    const host = await connectPeer(a.wsUrl, mesh, mesh.members[0]!);
    const caller = await connectPeer(a.wsUrl, mesh, mesh.members[1]!);
    await host.request({ type: 'mcp.register', server: 'calc', description: 'maths', tools });
    host.on('frame', (f) => {
      if (f.type === 'mcp.invoke') host.write({ type: 'mcp.result', callId: f.callId as string, result: 3 });
    });
    expect((await caller.request({ type: 'mcp.list' })).servers).toHaveLength(1);
    expect(
      await caller.request({ type: 'mcp.call', callId: 'c1', server: 'calc', tool: 'add', args: {} }),
    ).toMatchObject({ result: 3 });
    // A refusal both sides make (no such server) is compared as well.
    await expect(
      caller.request({ type: 'mcp.call', callId: 'c2', server: 'nope', tool: 'add' }),
    ).rejects.toThrow('not_found');
    // register, list, two calls.
    const agreed = await reportWhen(
      a,
      'ha.mcp',
      (row) => row.agree >= 4,
      'register, list and calls compared',
    );
    expect(agreed).toMatchObject({ disagree: 0, error: 0, mismatches: [] });

    // On node b the local registry has no `calc`: the call is refused there, the shared registry routes it.
    const far = await connectPeer(b.wsUrl, mesh, mesh.members[2]!);
    await expect(
      far.request({ type: 'mcp.call', callId: 'c3', server: 'calc', tool: 'add', args: {} }),
    ).rejects.toThrow('not_found');
    expect((await far.request({ type: 'mcp.list' })).servers).toEqual([]);
    const gap = await reportWhen(b, 'ha.mcp', (row) => row.disagree >= 2, 'the call and the list on b');
    const call = gap.mismatches.find((m) => m.subject === 'call calc')!;
    expect(call).toMatchObject({
      outcome: 'disagree',
      local: { refused: 'not_found' },
      shared: { routed: host.sessionId },
    });
    const list = gap.mismatches.find((m) => m.subject === `mcp.list ${mesh.meshId}`)!;
    expect(list.local).toEqual({ servers: [] });
    expect((list.shared as { servers: Array<{ server: string }> }).servers.map((s) => s.server)).toEqual([
      'calc',
    ]);

    // The host's socket closes on a: both sides take `calc` offline, and a's next call agrees on it.
    host.close();
    await waitFor(
      async () => {
        const entry = await redis.hget(`${prefix}shadow:mcp:${mesh.meshId}`, 'calc');
        return entry !== null && (JSON.parse(entry) as { online: boolean }).online === false;
      },
      { what: 'calc offline in the copy' },
    );
    const before = (await report(a, 'ha.mcp')).agree;
    await expect(
      caller.request({ type: 'mcp.call', callId: 'c4', server: 'calc', tool: 'add', args: {} }),
    ).rejects.toThrow('unavailable');
    await reportWhen(a, 'ha.mcp', (row) => row.agree > before, 'the offline call compared');
    expect((await report(a, 'ha.mcp')).disagree).toBe(0);

    expect(await liveRows('mcp_servers')).toBe(0);
  }, 60_000);
});
