import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame } from '../../protocol/frames.js';
import type { TestNode } from '../helpers/broker.js';
import { runWorkbench } from '../helpers/cli.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let node: TestNode;

beforeAll(async () => {
  db = await createTestDatabase('audit');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

type Entry = {
  seq: number;
  eventType: string;
  actor: string | null;
  payload: Record<string, unknown>;
  hash: string;
};
type Result = Frame & { entries: Entry[] };
type Verify = Frame & {
  valid: boolean;
  entries: number;
  brokenAt?: { seq: number; id: number; reason: string };
  forks: Array<{ kind: string; seq: number; rowIds: number[] }>;
};

describe('audit chain', () => {
  it('pages audit.query by bytes too: a page of large entries stops before 64 KiB and says more; the next page goes on', async () => {
    const mesh = await createMesh(node, 1);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    // mcp.registered records the tool names: 100 names of 64 characters, ~7 KiB an entry.
    const tools = Array.from({ length: 100 }, (_, i) => ({
      name: `${String(i).padStart(3, '0')}${'t'.repeat(61)}`,
    }));
    for (let i = 0; i < 60; i++) await a.request({ type: 'mcp.register', server: 'big', tools });
    const seen = new Set<number>();
    let before: number | undefined;
    for (let pages = 0; pages < 10; pages++) {
      const rid = `page-${pages}`;
      const page = await a.request<Result & { more?: true }>({
        type: 'audit.query',
        limit: 1000,
        rid,
        ...(before === undefined ? {} : { before }),
      });
      expect(Buffer.byteLength(JSON.stringify(page))).toBeLessThanOrEqual(64 * 1024);
      for (const entry of page.entries) seen.add(entry.seq);
      if (!page.more) break;
      expect(page.entries.length).toBeGreaterThan(0);
      before = page.entries[page.entries.length - 1]!.seq;
    }
    // Every entry of the mesh, each once: 60 registrations (the first one also replaced nothing).
    expect(seen.size).toBeGreaterThanOrEqual(60);
    expect(Math.min(...seen)).toBe(1);
  });

  it('records what happens in a mesh (metadata, never bodies), newest first, with paging', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    await a.send(mesh.members[1]!.pubkey, 'the secret body', { id: 'audit-1' });
    await a.request({ type: 'mcp.register', server: 'srv', tools: [] });
    const { scheduleId } = await a.request({
      type: 'schedule.create',
      to: '*',
      body: 'later',
      at: Date.now() + 3_600_000,
    });
    await a.request({ type: 'schedule.cancel', scheduleId });
    const result = await b.request<Result>({ type: 'audit.query' });
    expect(result.entries.map((e) => e.eventType)).toEqual([
      'schedule.cancelled',
      'schedule.created',
      'mcp.registered',
      'message.sent',
      'peer.joined',
      'peer.joined',
    ]);
    expect(result.entries.map((e) => e.seq)).toEqual([6, 5, 4, 3, 2, 1]);
    const sent = result.entries.find((e) => e.eventType === 'message.sent')!;
    expect(sent).toMatchObject({
      actor: mesh.members[0]!.pubkey,
      payload: { id: 'audit-1', recipients: 1, bytes: 15 },
    });
    expect(JSON.stringify(result.entries)).not.toContain('the secret body');
    const page = await b.request<Result>({ type: 'audit.query', limit: 2, before: 4 });
    expect(page.entries.map((e) => e.seq)).toEqual([3, 2]);
    await expect(b.request({ type: 'audit.query', limit: 0 })).rejects.toThrow('bad_request');
    const verify = await b.request<Verify>({ type: 'audit.verify' });
    expect(verify).toMatchObject({ type: 'audit.verify_result', valid: true, entries: 6, forks: [] });
  });

  it('keeps one chain whatever the case of the mesh id a peer signs with', async () => {
    const mesh = await createMesh(node, 2);
    const upper = { ...mesh, meshId: mesh.meshId.toUpperCase() };
    const socket = await rawSession(node.wsUrl, helloFrame(upper, mesh.members[0]!));
    const lower = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    socket.send({ type: 'send', id: 'u1', to: mesh.members[1]!.pubkey, body: 'hi', rid: 's' });
    await socket.next((f) => f.rid === 's');
    const verify = await lower.request<Verify>({ type: 'audit.verify' });
    expect(verify).toMatchObject({ valid: true, entries: 3, forks: [] });
    socket.close();
  });

  it('refuses UPDATE, DELETE and TRUNCATE of audit rows in the database itself', async () => {
    const mesh = await createMesh(node, 1);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    await a.request({ type: 'audit.verify' }); // flushes the join event
    await expect(
      db.query("UPDATE audit_log SET actor = 'x' WHERE mesh_id = $1", [mesh.meshId]),
    ).rejects.toThrow('append-only');
    await expect(db.query('DELETE FROM audit_log WHERE mesh_id = $1', [mesh.meshId])).rejects.toThrow(
      'append-only',
    );
    await expect(db.query('TRUNCATE audit_log')).rejects.toThrow('append-only');
    const rows = await db.query('SELECT count(*)::int AS n FROM audit_log WHERE mesh_id = $1', [mesh.meshId]);
    expect(rows.rows[0]?.n).toBe(1);
  });

  it('finds a row tampered with in the database at the exact row, over the WebSocket and in the CLI', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    for (let i = 0; i < 5; i++) await a.send(mesh.members[1]!.pubkey, `m${i}`);
    expect((await a.request<Verify>({ type: 'audit.verify' })).valid).toBe(true);
    const target = await db.query<{ id: number }>('SELECT id FROM audit_log WHERE mesh_id = $1 AND seq = 4', [
      mesh.meshId,
    ]);
    const rowId = target.rows[0]!.id;
    await db.query('ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only');
    try {
      await db.query(`UPDATE audit_log SET payload = jsonb_set(payload, '{recipients}', '7') WHERE id = $1`, [
        rowId,
      ]);
    } finally {
      await db.query('ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only');
    }
    const verify = await a.request<Verify>({ type: 'audit.verify' });
    expect(verify).toMatchObject({
      valid: false,
      entries: 6,
      brokenAt: { seq: 4, id: rowId, reason: 'hash does not match the row' },
    });

    const cli = await runWorkbench(['audit', 'verify', '--mesh', mesh.meshId, '--database-url', db.url]);
    expect(cli.code).toBe(1);
    expect(cli.stdout).toContain(`BROKEN  ${mesh.meshId}`);
    expect(cli.stdout).toContain(`first broken row: seq 4 (row id ${rowId}): hash does not match the row`);
  });

  it('documents the local gap: two nodes appending to one mesh fork its chain, and the verifier says where', async () => {
    const other = await startNode({
      kind: 'in-process',
      databaseUrl: db.url,
      env: { SEND_BURST: '1000', SEND_RATE_PER_MIN: '10000' },
    });
    try {
      const mesh = await createMesh(node, 2);
      const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
      const b = await connectPeer(other.wsUrl, mesh, mesh.members[1]!);
      // Each node caches the chain head after its first append, then extends its own copy.
      for (let i = 0; i < 4; i++) {
        await a.send(mesh.members[1]!.pubkey, `a${i}`);
        await a.request({ type: 'audit.query', limit: 1 });
        await b.send(mesh.members[0]!.pubkey, `b${i}`);
        await b.request({ type: 'audit.query', limit: 1 });
      }
      const verify = await a.request<Verify>({ type: 'audit.verify' });
      expect(verify.valid).toBe(false);
      expect(verify.forks.length).toBeGreaterThan(0);
      expect(verify.forks[0]).toMatchObject({ kind: 'seq' });
      expect(verify.forks[0]!.rowIds).toHaveLength(2);
      const cli = await runWorkbench(['audit', 'verify', '--database-url', db.url]);
      expect(cli.code).toBe(1);
      expect(cli.stdout).toMatch(/fork: rows \d+, \d+ share the same seq/);
    } finally {
      closeAllClients();
      await other.stop();
    }
  });
});
