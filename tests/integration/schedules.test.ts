import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame, Message } from '../../protocol/frames.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let node: TestNode;

beforeAll(async () => {
  db = await createTestDatabase('schedules');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

type Created = Frame & { scheduleId: string; nextFireAt: number };

describe('scheduled messages on one node', () => {
  it('schedule.list comes in pages of at most 64 KiB, soonest first, every schedule once', async () => {
    const mesh = await createMesh(node, 2);
    const creator = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const base = Date.now() + 3_600_000;
    const created: string[] = [];
    for (let i = 0; i < 40; i++) {
      const { scheduleId } = await creator.request<Frame & { scheduleId: string }>({
        type: 'schedule.create',
        to: mesh.members[1]!.pubkey,
        body: `${i}:${'b'.repeat(30 * 1024)}`,
        at: base + i * 1000,
      });
      created.push(scheduleId);
    }
    const listed: string[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 20; pages++) {
      const page = await creator.request<Frame & { schedules: Array<{ scheduleId: string }>; next?: string }>(
        {
          type: 'schedule.list',
          ...(cursor === undefined ? {} : { cursor }),
        },
      );
      expect(Buffer.byteLength(JSON.stringify(page))).toBeLessThanOrEqual(64 * 1024);
      listed.push(...page.schedules.map((s) => s.scheduleId));
      if (!page.next) break;
      cursor = page.next;
    }
    expect(listed).toEqual(created); // created soonest first: the same order
    await expect(creator.request({ type: 'schedule.list', cursor: 'nonsense' })).rejects.toThrow(
      'bad_request',
    );
  });

  it('fires a one-shot message from the creator, even while the creator is offline', async () => {
    const mesh = await createMesh(node, 2);
    const creator = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const recipient = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const at = Date.now() + 300;
    const created = await creator.request<Created>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'ping',
      at,
    });
    expect(created).toMatchObject({ type: 'schedule.created', nextFireAt: at });
    creator.close(); // the occurrence still comes from the creator
    const message = (await recipient.next('message')) as Message;
    expect(message).toMatchObject({
      body: 'ping',
      from: mesh.members[0]!.pubkey,
      fromSession: creator.sessionId,
      scheduleId: created.scheduleId,
      occurrence: 1,
    });
    expect(Date.now()).toBeGreaterThanOrEqual(at);
    const row = await waitFor(async () => {
      const r = await db.query('SELECT occurrences, finished_at FROM schedules WHERE id = $1', [
        created.scheduleId,
      ]);
      return r.rows[0]?.finished_at ? r.rows[0] : undefined;
    });
    expect(row.occurrences).toBe(1);
  });

  it('computes a cron schedule in its time zone and lists it for its creator only', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const created = await a.request<Created>({
      type: 'schedule.create',
      to: '*',
      body: 'standup',
      cron: '0 9 * * *',
      tz: 'Asia/Tokyo',
    });
    const next = new Date(created.nextFireAt);
    expect(next.getUTCHours()).toBe(0); // 09:00 in Tokyo (UTC+9, no DST) is 00:00 UTC
    expect(next.getUTCMinutes()).toBe(0);
    expect(created.nextFireAt - Date.now()).toBeLessThanOrEqual(24 * 3600_000);
    const list = await a.request<Frame & { schedules: Array<Record<string, unknown>> }>({
      type: 'schedule.list',
    });
    expect(list.schedules).toEqual([
      expect.objectContaining({
        scheduleId: created.scheduleId,
        cron: '0 9 * * *',
        tz: 'Asia/Tokyo',
        body: 'standup',
      }),
    ]);
    expect((await b.request({ type: 'schedule.list' })).schedules).toEqual([]);
  });

  it('cancels for the creator only; a cancelled schedule never fires', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const bodies: string[] = [];
    b.on('message', (m) => bodies.push(m.body));
    const doomed = await a.request<Created>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'never',
      at: Date.now() + 400,
    });
    await expect(b.request({ type: 'schedule.cancel', scheduleId: doomed.scheduleId })).rejects.toThrow(
      'forbidden',
    );
    // The id in capitals is the same schedule, and its timer stops too.
    expect(
      await a.request({ type: 'schedule.cancel', scheduleId: doomed.scheduleId.toUpperCase() }),
    ).toMatchObject({
      type: 'schedule.cancelled',
      scheduleId: doomed.scheduleId,
    });
    await expect(a.request({ type: 'schedule.cancel', scheduleId: doomed.scheduleId })).rejects.toThrow(
      'not_found',
    );
    await expect(
      a.request({ type: 'schedule.cancel', scheduleId: '00000000-0000-4000-8000-000000000000' }),
    ).rejects.toThrow('not_found');
    // A later schedule does fire: by then the cancelled one would have.
    await a.request({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'later',
      at: Date.now() + 700,
    });
    await waitFor(() => bodies.includes('later'));
    expect(bodies).toEqual(['later']);
    expect((await a.request({ type: 'schedule.list' })).schedules).toEqual([]);
  });

  it.each([
    [{ body: 'x' }, 'exactly one of "at"'],
    [{ body: 'x', at: Date.now() + 60_000, cron: '* * * * *' }, 'exactly one of "at"'],
    [{ body: 'x', cron: '61 * * * *' }, 'field "cron"'],
    [{ body: 'x', cron: '* * * *' }, 'exactly 5 fields'],
    [{ body: 'x', cron: '* * * * * *' }, 'exactly 5 fields'],
    [{ body: 'x', cron: '* * * * *', tz: 'Mars/Olympus' }, 'unknown time zone'],
    [{ body: 'x', at: Date.now() - 60_000 }, '"at" is in the past'],
    [{ body: 'x', at: 'tomorrow' }, 'field "at"'],
    [{ body: 'x', at: Date.now() + 60_000, tz: 'UTC' }, '"tz" goes with "cron"'],
    [{ at: Date.now() + 60_000 }, 'missing field "body"'],
  ])('refuses %j with bad_request, storing nothing', async (fields, message) => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    await expect(
      a.request({ type: 'schedule.create', to: mesh.members[1]!.pubkey, ...fields }),
    ).rejects.toThrow(message);
    const rows = await db.query('SELECT count(*)::int AS n FROM schedules WHERE mesh_id = $1', [mesh.meshId]);
    expect(rows.rows[0]?.n).toBe(0);
  });

  it('refuses an unknown recipient and enforces the per-member limit', async () => {
    const limited = await startNode({
      kind: 'in-process',
      databaseUrl: db.url,
      env: { SCHEDULE_MAX_PER_MEMBER: '2' },
    });
    try {
      const mesh = await createMesh(limited, 2);
      const a = await connectPeer(limited.wsUrl, mesh, mesh.members[0]!);
      await expect(
        a.request({ type: 'schedule.create', to: 'ab'.repeat(32), body: 'x', at: Date.now() + 60_000 }),
      ).rejects.toThrow('not_found');
      const make = () => a.request({ type: 'schedule.create', to: '*', body: 'x', at: Date.now() + 60_000 });
      await make();
      await make();
      await expect(make()).rejects.toThrow('limit_exceeded');
    } finally {
      closeAllClients();
      await limited.stop();
    }
  });

  it('fires a missed occurrence once at boot and re-arms the cron (local re-arm)', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const created = await a.request<Created>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'tick',
      cron: '0 0 1 1 *',
    });
    // The occurrence came due while no node ran (moved into the past behind the node's back).
    await db.query("UPDATE schedules SET next_fire_at = now() - interval '1 hour' WHERE id = $1", [
      created.scheduleId,
    ]);
    const booted = await startNode({ kind: 'in-process', databaseUrl: db.url });
    try {
      const b = await connectPeer(booted.wsUrl, mesh, mesh.members[1]!);
      const message = (await b.next('message')) as Message;
      expect(message).toMatchObject({ scheduleId: created.scheduleId, occurrence: 1, body: 'tick' });
      expect(message.messageId).toMatch(/^[1-9]\d*-[0-9a-f]{16}$/); // docs/protocol.md § Message identity
      const row = await waitFor(async () => {
        const r = await db.query('SELECT occurrences, next_fire_at FROM schedules WHERE id = $1', [
          created.scheduleId,
        ]);
        return r.rows[0]?.occurrences === 1 ? r.rows[0] : undefined;
      });
      expect(new Date(row.next_fire_at).getUTCMonth()).toBe(0); // re-armed for the next 1 January
      expect(new Date(row.next_fire_at).getTime()).toBeGreaterThan(Date.now());
    } finally {
      closeAllClients();
      await booted.stop();
    }
  });

  it('documents the local gap: a node that boots re-arms the same schedule and fires a second copy', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const created = await a.request<Created>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'twice',
      at: Date.now() + 1000,
    });
    // A second node booting while the schedule is pending re-arms it as well.
    const second = await startNode({ kind: 'in-process', databaseUrl: db.url });
    try {
      const rows = await waitFor(async () => {
        const r = await db.query('SELECT occurrence FROM messages WHERE schedule_id = $1', [
          created.scheduleId,
        ]);
        return r.rows.length >= 2 ? r.rows : undefined;
      });
      expect(rows.map((r) => r.occurrence)).toEqual([1, 1]);
    } finally {
      closeAllClients();
      await second.stop();
    }
  });
});
