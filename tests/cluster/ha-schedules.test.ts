import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame } from '../../protocol/frames.js';
import { PHASE3_FLAGS, TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let cluster: TestCluster;

beforeAll(async () => {
  db = await createTestDatabase('ha_schedules');
  // Occurrences take from the creator's send limit (issue 17): a quota above the 60 fired at once.
  cluster = new TestCluster(db.url, {
    SCHEDULE_POLL_MS: '200',
    SCHEDULE_MAX_PER_MEMBER: '1000',
    SEND_BURST: '1000',
    SEND_RATE_PER_MIN: '100000',
  });
  // The shipped phase-3 preset, active lease included (docs/active-lease.md: it gates only local rows).
  cluster.setFlags('ha', PHASE3_FLAGS);
  await Promise.all(['s1', 's2', 's3'].map((id) => cluster.start(id, 'ha')));
  for (const id of ['s1', 's2', 's3']) await cluster.waitActing(id, { 'ha.schedules': true });
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  await db?.drop();
});

const ws = (id: string) => cluster.node(id).wsUrl;

async function createDue(count: number, at: number) {
  const mesh = await cluster.createMesh(2);
  const creator = await connectPeer(ws('s1'), mesh, mesh.members[0]!);
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const created = await creator.request<Frame & { scheduleId: string }>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: `occurrence ${i}`,
      at,
    });
    ids.push(created.scheduleId);
  }
  return { mesh, ids };
}

async function firedCounts(ids: string[]) {
  const rows = await db.query<{ id: string; n: number }>(
    `SELECT s.id, (SELECT count(*)::int FROM messages m WHERE m.schedule_id = s.id) AS n
       FROM schedules s WHERE s.id = ANY ($1::uuid[])`,
    [ids],
  );
  return rows.rows;
}

describe('schedules with ha.schedules on, three nodes', () => {
  it('fires each of 60 schedules due at the same instant exactly once', async () => {
    const { mesh, ids } = await createDue(60, Date.now() + 8000); // lead for 60 creates on loaded cores
    const recipient = await connectPeer(ws('s3'), mesh, mesh.members[1]!);
    const got: string[] = [];
    recipient.on('message', (m) => got.push(String(m.scheduleId)));
    await waitFor(async () => (await firedCounts(ids)).every((r) => r.n > 0), { timeoutMs: 20_000 });
    const counts = await firedCounts(ids);
    expect(counts.filter((r) => r.n !== 1)).toEqual([]);
    const occurrences = await db.query(
      'SELECT count(*)::int AS n FROM schedule_occurrences WHERE schedule_id = ANY ($1::uuid[])',
      [ids],
    );
    expect(occurrences.rows[0]?.n).toBe(60);
    await waitFor(() => got.length === 60);
    expect(new Set(got).size).toBe(60);
    const byNode = await db.query(
      'SELECT node_id, count(*)::int AS n FROM schedule_occurrences WHERE schedule_id = ANY ($1::uuid[]) GROUP BY node_id',
      [ids],
    );
    console.log(`60 simultaneous occurrences fired by: ${JSON.stringify(byNode.rows)}`);
  });

  it('respects a cancel made on another node', async () => {
    const mesh = await cluster.createMesh(2);
    const onS1 = await connectPeer(ws('s1'), mesh, mesh.members[0]!);
    const onS2 = await connectPeer(ws('s2'), mesh, mesh.members[0]!);
    const { scheduleId } = await onS1.request<Frame & { scheduleId: string }>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'never',
      at: Date.now() + 800,
    });
    await onS2.request({ type: 'schedule.cancel', scheduleId });
    const later = await onS2.request<Frame & { scheduleId: string }>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'later',
      at: Date.now() + 1200,
    });
    await waitFor(async () => (await firedCounts([later.scheduleId]))[0]?.n === 1, { timeoutMs: 5000 });
    expect((await firedCounts([scheduleId]))[0]?.n).toBe(0);
  });

  it('skips an occurrence whose recipient was revoked, and the others still fire', async () => {
    const mesh = await cluster.createMesh(3);
    const creator = await connectPeer(ws('s2'), mesh, mesh.members[0]!);
    const at = Date.now() + 1000;
    const doomed = await creator.request<Frame & { scheduleId: string }>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'to a revoked member',
      at,
    });
    const fine = await creator.request<Frame & { scheduleId: string }>({
      type: 'schedule.create',
      to: mesh.members[2]!.pubkey,
      body: 'to a member',
      at: at + 100,
    });
    await fetch(
      `${cluster.node('s2').url}/admin/meshes/${mesh.meshId}/members/${mesh.members[1]!.pubkey}/revoke`,
      {
        method: 'POST',
        headers: { authorization: 'Bearer test-admin-token-0123456789' },
      },
    );
    await waitFor(async () => (await firedCounts([fine.scheduleId]))[0]?.n === 1, { timeoutMs: 5000 });
    const skipped = await waitFor(async () => {
      const r = await db.query('SELECT finished_at, occurrences FROM schedules WHERE id = $1', [
        doomed.scheduleId,
      ]);
      return r.rows[0]?.finished_at ? r.rows[0] : undefined;
    });
    expect(skipped.occurrences).toBe(1);
    expect((await firedCounts([doomed.scheduleId]))[0]?.n).toBe(0);
  });

  it('still fires each occurrence exactly once when a node is killed as they come due', async () => {
    // Enough lead for creating 40 schedules on loaded shared cores (an `at` already past is refused).
    const at = Date.now() + 8000;
    const { ids } = await createDue(40, at);
    // The kill lands as the occurrences come due: once the first of them has fired (a row in Postgres),
    // not at a moment guessed from the clock.
    await waitFor(async () => (await firedCounts(ids)).some((r) => r.n > 0), {
      timeoutMs: 20_000,
      intervalMs: 10,
      what: 'the first occurrence fired',
    });
    await cluster.kill('s1');
    await waitFor(async () => (await firedCounts(ids)).every((r) => r.n > 0), { timeoutMs: 20_000 });
    expect((await firedCounts(ids)).filter((r) => r.n !== 1)).toEqual([]);
  });
});
