/**
 * Issue 17, driven the way a member with a valid key would abuse the broker, over real WebSockets against
 * a real node (Postgres, Redis): schedules and watch notifications around the send limit, notifications
 * larger than MAX_BODY_BYTES, what a revoked member keeps running, other members' watch URLs (API keys)
 * in `audit.query`, and a schedule `at` beyond the Date range. The cross-node part of revocation is in
 * tests/cluster/revocation.test.ts; both implementations of each row in tests/contract/.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AuditEntry, Frame, Message, WatchInfo, WatchTriggered } from '../../protocol/frames.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

/** Burst 2, then 20 a minute: the burst window is 6 s (broker/rate-limits/rate-limits.ts). */
const SEND_BURST = 2;
const MAX_BODY_BYTES = 32 * 1024;

let db: TestDatabase;
let node: InProcessNode;
let server: Server;
let base = '';
/** The test's web site: each path answers its value (JSON `{data: value}`); every request is counted. */
const site = { values: new Map<string, string>(), hits: new Map<string, number[]>() };

beforeAll(async () => {
  db = await createTestDatabase('abuse_schedules_watches');
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      SEND_BURST: String(SEND_BURST),
      SEND_RATE_PER_MIN: '20',
      WATCH_ALLOW_PRIVATE: 'true',
      MAX_BODY_BYTES: String(MAX_BODY_BYTES),
    },
  });
  server = createServer((request, response) => {
    const path = new URL(request.url ?? '/', 'http://x').pathname;
    site.hits.set(path, [...(site.hits.get(path) ?? []), Date.now()]);
    response
      .setHeader('content-type', 'application/json')
      .end(JSON.stringify({ data: site.values.get(path) ?? 'none' }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  server?.close();
  await db?.drop();
});

type Created = Frame & { scheduleId: string };
type Listed = Frame & { watches: WatchInfo[] };

const auditOf = async (client: MeshClient) =>
  (await client.request<Frame & { entries: AuditEntry[] }>({ type: 'audit.query', limit: 1000 })).entries;

describe('schedules count against the send limit', () => {
  it('40 one-shot schedules due at once (DMs and broadcasts) deliver at most the burst; the rest are skipped as rate_limited', async () => {
    const mesh = await createMesh(node, 2);
    const attacker = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const victim = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const got: Message[] = [];
    victim.on('message', (m: Message) => got.push(m));
    // Pipelined, with a lead that 40 round trips on a loaded machine fit in (a past `at` is refused).
    const at = Date.now() + 2500;
    const created = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        attacker.request<Created>({
          type: 'schedule.create',
          to: i % 2 === 0 ? mesh.members[1]!.pubkey : '*',
          body: `flood ${i}`,
          at,
        }),
      ),
    );
    const ids = created.map((c) => c.scheduleId);
    // Every occurrence is decided (delivered or skipped) and audited.
    await waitFor(
      async () => {
        const entries = await auditOf(attacker);
        return (
          entries.filter((e) => e.eventType === 'schedule.fired' || e.eventType === 'schedule.skipped')
            .length === 40
        );
      },
      { timeoutMs: 15_000, what: '40 occurrences decided' },
    );
    // Every occurrence is decided, so the deliveries still to come are exactly the fired ones.
    const fired = (await auditOf(attacker)).filter((e) => e.eventType === 'schedule.fired').length;
    await waitFor(() => got.length >= fired, { what: `${fired} fired occurrences delivered` });
    // All due within one burst window: SEND_BURST delivered (two windows at the very most).
    expect(got.length).toBeGreaterThanOrEqual(SEND_BURST);
    expect(got.length).toBeLessThanOrEqual(2 * SEND_BURST);
    const entries = await auditOf(attacker);
    const skipped = entries.filter((e) => e.eventType === 'schedule.skipped');
    expect(skipped.length).toBe(40 - got.length);
    expect(skipped.every((e) => (e.payload as { reason: string }).reason === 'rate_limited')).toBe(true);
    // One quota: the attacker's own sends are refused too, the schedules are spent.
    await expect(
      attacker.request({ type: 'send', id: 'after', to: mesh.members[1]!.pubkey, body: 'x' }),
    ).rejects.toThrow('rate_limited');
    const { schedules } = await attacker.request<Frame & { schedules: unknown[] }>({ type: 'schedule.list' });
    expect(schedules).toEqual([]);
    expect(new Set(ids).size).toBe(40);
  });
});

describe('watch notifications are bounded', () => {
  it('a 600 KiB value is notified as its sha256, size and an excerpt, within MAX_BODY_BYTES', async () => {
    const mesh = await createMesh(node, 1);
    const creator = await connectPeer(node.wsUrl, mesh, mesh.members[0]!, { autoAck: false });
    const big = `${'é'.repeat(100)}${'x'.repeat(600 * 1024)}`;
    site.values.set('/big', big);
    const triggered: WatchTriggered[] = [];
    creator.on('watch.triggered', (t) => triggered.push(t));
    // not_match notifies on the first poll already: the attacker needs no second poll.
    await creator.request({
      type: 'watch.create',
      url: `${base}/big`,
      mode: 'json',
      extract: 'data',
      intervalSec: 5,
      notifyOn: 'not_match:small',
    });
    await waitFor(() => triggered.length === 1, { timeoutMs: 10_000, what: 'the notification' });
    const value = triggered[0]!.newValue;
    expect(value).toEqual({
      sha256: createHash('sha256').update(big, 'utf8').digest('hex'),
      bytes: Buffer.byteLength(big, 'utf8'),
      excerpt: expect.any(String),
    });
    const excerpt = (value as { excerpt: string }).excerpt;
    expect(excerpt.length).toBeGreaterThan(1000);
    expect(big.startsWith(excerpt)).toBe(true);
    const stored = await db.query<{ bytes: number }>(
      `SELECT max(octet_length(m.body))::int AS bytes FROM messages m WHERE m.kind = 'watch.triggered'`,
    );
    expect(stored.rows[0]!.bytes).toBeLessThanOrEqual(MAX_BODY_BYTES);
  });

  it('watch.list does not echo 600 KiB values back: a last value beyond 4 KiB is listed in its digest form', async () => {
    const mesh = await createMesh(node, 1);
    const creator = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const big = 'y'.repeat(600 * 1024);
    site.values.set('/big-list', big);
    for (let i = 0; i < 3; i++)
      await creator.request({
        type: 'watch.create',
        url: `${base}/big-list`,
        mode: 'json',
        extract: 'data',
        intervalSec: 60,
      });
    let reply: Listed | undefined;
    await waitFor(
      async () => {
        reply = await creator.request<Listed>({ type: 'watch.list' });
        return reply.watches.every((w) => w.lastValue !== null);
      },
      { what: 'three baselines' },
    );
    expect(JSON.stringify(reply).length).toBeLessThan(3 * 4096 + 4096);
    for (const watch of reply!.watches)
      expect(watch.lastValue).toEqual({
        sha256: createHash('sha256').update(big).digest('hex'),
        bytes: big.length,
        excerpt: 'y'.repeat(4096),
      });
  });

  it('a notification takes from the send limit; one held back is not lost: it arrives at a later poll', async () => {
    const mesh = await createMesh(node, 2);
    const creator = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    // The attacker spends its burst, so any notification now would be beyond the limit.
    for (let i = 0; i < SEND_BURST; i++)
      await creator.request({ type: 'send', id: `spend-${i}`, to: mesh.members[1]!.pubkey, body: 'x' });
    await expect(
      creator.request({ type: 'send', id: 'over', to: mesh.members[1]!.pubkey, body: 'x' }),
    ).rejects.toThrow('rate_limited');
    site.values.set('/held', 'ready');
    const triggered: WatchTriggered[] = [];
    creator.on('watch.triggered', (t) => triggered.push(t));
    const { watchId } = await creator.request<Frame & { watchId: string }>({
      type: 'watch.create',
      url: `${base}/held`,
      mode: 'json',
      extract: 'data',
      intervalSec: 5,
      notifyOn: 'match:ready',
    });
    // The first poll matches but is held back, and says so.
    await waitFor(
      async () => {
        const { watches } = await creator.request<Listed>({ type: 'watch.list' });
        return watches[0]?.lastError?.includes('held back') === true;
      },
      { timeoutMs: 5000, what: 'the held-back poll' },
    );
    expect(triggered).toEqual([]);
    // Once the burst window refills, a later poll notifies: exactly once.
    await waitFor(() => triggered.length === 1, { timeoutMs: 20_000, what: 'the notification, later' });
    expect(triggered[0]).toMatchObject({ watchId, oldValue: null, newValue: 'ready' });
    // One more poll (fetched and recorded): the value still matches, nothing new to say.
    const checked = (await creator.request<Listed>({ type: 'watch.list' })).watches[0]?.lastCheckedAt;
    await waitFor(
      async () =>
        (await creator.request<Listed>({ type: 'watch.list' })).watches[0]?.lastCheckedAt !== checked,
      { timeoutMs: 8000, intervalMs: 100, what: 'the next poll' },
    );
    expect(triggered).toHaveLength(1);
  }, 45_000);
});

describe('revocation stops everything the member owns', () => {
  it('a revoked member’s watch polls no more and its schedules are cancelled before they fire', async () => {
    const mesh = await createMesh(node, 3);
    const member = await connectPeer(node.wsUrl, mesh, mesh.members[0]!, { reconnect: false });
    const recipient = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    // A witness member with the same watch and one-shot, made just after the revoked member's: its poll
    // and its delivery are the rounds in which the revoked member's would have come (none may).
    const witness = await connectPeer(node.wsUrl, mesh, mesh.members[2]!);
    const got: Message[] = [];
    recipient.on('message', (m: Message) => got.push(m));
    await member.request({ type: 'watch.create', url: `${base}/revoked`, mode: 'hash', intervalSec: 5 });
    await witness.request({ type: 'watch.create', url: `${base}/witness`, mode: 'hash', intervalSec: 5 });
    const at = Date.now() + 3000;
    const later = await member.request<Created>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'after revocation',
      at,
    });
    await witness.request<Created>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'witness',
      at,
    });
    const cron = await member.request<Created>({
      type: 'schedule.create',
      to: '*',
      body: 'every minute',
      cron: '* * * * *',
    });
    await waitFor(() => (site.hits.get('/revoked') ?? []).length === 1, { what: 'the first poll' });
    await waitFor(() => (site.hits.get('/witness') ?? []).length === 1, { what: "the witness's first poll" });
    const revoked = await node.admin(
      `/admin/meshes/${mesh.meshId}/members/${mesh.members[0]!.pubkey}/revoke`,
      {
        method: 'POST',
      },
    );
    expect(revoked.status).toBe(200);
    const revokedAt = Date.now();
    // Past the watch's next poll (5 s) and the one-shot's time, as the witness's shows: nothing may happen.
    await waitFor(() => got.some((m) => m.body === 'witness'), {
      timeoutMs: 10_000,
      what: "the witness's one-shot",
    });
    await waitFor(() => (site.hits.get('/witness') ?? []).length >= 2, {
      timeoutMs: 10_000,
      what: "the witness's next poll",
    });
    expect((site.hits.get('/revoked') ?? []).filter((t) => t > revokedAt)).toEqual([]);
    expect(got.filter((m) => m.body !== 'witness')).toEqual([]);
    const rows = await db.query<{ id: string; cancelled: boolean }>(
      'SELECT id, cancelled_at IS NOT NULL AS cancelled FROM schedules WHERE id = ANY ($1::uuid[]) ORDER BY id',
      [[later.scheduleId, cron.scheduleId]],
    );
    expect(rows.rows.map((r) => r.cancelled)).toEqual([true, true]);
    const watches = await db.query<{ live: number }>(
      `SELECT count(*)::int AS live FROM watches w JOIN members m ON m.id = w.member_id
        WHERE m.pubkey = $1 AND w.deleted_at IS NULL`,
      [mesh.members[0]!.pubkey],
    );
    expect(watches.rows[0]!.live).toBe(0);
  }, 30_000);
});

describe('privacy of audit.query', () => {
  it('another member sees a watch URL without its query string or path (the API key); the creator sees it whole; the chain verifies', async () => {
    const mesh = await createMesh(node, 2);
    const owner = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const snoop = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const url = `${base}/private/feed?apikey=SECRET-KEY-123&user=alice`;
    await owner.request({ type: 'watch.create', url, mode: 'status', intervalSec: 60 });
    const created = (entries: AuditEntry[]) => entries.find((e) => e.eventType === 'watch.created')!;
    await waitFor(async () => created(await auditOf(snoop)) !== undefined);
    const seen = created(await auditOf(snoop));
    expect(JSON.stringify(seen)).not.toContain('SECRET-KEY-123');
    expect(JSON.stringify(seen)).not.toContain('/private/feed');
    expect(seen).toMatchObject({ redacted: true, payload: { url: `${base}/[redacted]` } });
    const own = created(await auditOf(owner));
    expect(own.payload).toMatchObject({ url });
    expect(own.redacted).toBeUndefined();
    // Redacted on read only: the stored chain still verifies.
    expect(await snoop.request({ type: 'audit.verify' })).toMatchObject({ valid: true });
  });
});

describe('bad input', () => {
  it('a schedule `at` beyond the Date range is bad_request and stores nothing', async () => {
    const mesh = await createMesh(node, 2);
    const peer = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const to = mesh.members[1]!.pubkey;
    for (const at of [1e300, 8.64e15 + 1, Number.MAX_SAFE_INTEGER]) {
      await expect(peer.request({ type: 'schedule.create', to, body: 'x', at })).rejects.toThrow(
        /bad_request.*field "at"/,
      );
    }
    // The last instant a Date holds is still a valid time.
    await expect(
      peer.request({ type: 'schedule.create', to, body: 'x', at: 8.64e15 }),
    ).resolves.toMatchObject({
      type: 'schedule.created',
      nextFireAt: 8.64e15,
    });
    const rows = await db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM schedules WHERE mesh_id = $1',
      [mesh.meshId],
    );
    expect(rows.rows[0]!.n).toBe(1);
  });
});
