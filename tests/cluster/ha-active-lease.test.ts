import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame } from '../../protocol/frames.js';
import { TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let cluster: TestCluster;

const backgroundWork = async (id: string) =>
  ((await (await fetch(`${cluster.node(id).url}/health`)).json()) as { backgroundWork: string })
    .backgroundWork;

beforeAll(async () => {
  db = await createTestDatabase('ha_active_lease');
  // Occurrences take from the creator's send limit: a quota above the 20 it fires at once.
  cluster = new TestCluster(db.url, {
    SCHEDULE_MAX_PER_MEMBER: '1000',
    SEND_BURST: '1000',
    SEND_RATE_PER_MIN: '100000',
  });
  // Phase 1: the active lease on; schedules still the single-node implementation.
  cluster.setFlags('phase1', ['ha.active-lease', 'ha.presence']);
  await cluster.start('primary', 'phase1');
  await waitFor(async () => (await backgroundWork('primary')) === 'active');
  await cluster.start('standby', 'phase1');
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  await db?.drop();
});

/** `count` schedules due `leadMs` from when they are sent (pipelined: a past `at` would be refused). */
async function schedule(count: number, leadMs: number) {
  const mesh = await cluster.createMesh(2);
  const creator = await connectPeer(cluster.node('primary').wsUrl, mesh, mesh.members[0]!);
  const at = Date.now() + leadMs;
  const created = await Promise.all(
    Array.from({ length: count }, (_, i) =>
      creator.request<Frame & { scheduleId: string }>({
        type: 'schedule.create',
        to: mesh.members[1]!.pubkey,
        body: `s${i}`,
        at,
      }),
    ),
  );
  const ids = created.map((c) => c.scheduleId);
  creator.close();
  return ids;
}

const counts = async (ids: string[]) =>
  (
    await db.query<{ n: number }>(
      `SELECT (SELECT count(*)::int FROM messages m WHERE m.schedule_id = s.id) AS n FROM schedules s
        WHERE s.id = ANY ($1::uuid[])`,
      [ids],
    )
  ).rows.map((r) => r.n);

/**
 * A window of one schedule poll (SCHEDULE_POLL_MS, 500 ms by default, the same on every node) in which a
 * second copy would fire, measured by the node's own scheduler: a witness schedule due one poll period from
 * now, created through `through`, has fired (once) by the end of it.
 */
async function onePollLater(through: string): Promise<void> {
  const node = cluster.node(through);
  const mesh = await cluster.createMesh(2, node);
  const creator = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
  const { scheduleId } = await creator.request<Frame & { scheduleId: string }>({
    type: 'schedule.create',
    to: mesh.members[1]!.pubkey,
    body: 'witness',
    at: Date.now() + 500,
  });
  creator.close();
  await waitFor(async () => (await counts([scheduleId]))[0] === 1, {
    timeoutMs: 5000,
    what: 'the witness schedule',
  });
}

describe('active/passive with ha.active-lease on', () => {
  it('runs background work on the lease holder only: the warm standby fires nothing', async () => {
    expect(await backgroundWork('standby')).toBe('standby');
    const ids = await schedule(20, 1500);
    await waitFor(async () => (await counts(ids)).every((n) => n > 0), { timeoutMs: 5000 });
    await onePollLater('primary');
    expect(await counts(ids)).toEqual(Array(20).fill(1));
    const metrics = await (await fetch(`${cluster.node('primary').url}/metrics`)).text();
    expect(metrics).toContain('mesh_broker_active_lease_held{node="primary"} 1');
  });

  it('hands the background work to the standby within 3 s of a SIGKILL of the active node', async () => {
    const ids = await schedule(10, 4000);
    const killedAt = Date.now();
    await cluster.kill('primary');
    await waitFor(async () => (await backgroundWork('standby')) === 'active', {
      timeoutMs: 5000,
      intervalMs: 20,
    });
    const takeover = Date.now() - killedAt;
    console.log(`standby took the active lease ${takeover} ms after the primary was killed`);
    expect(takeover).toBeLessThan(3000);
    // It re-armed the schedules: each fires once, on the new active node.
    await waitFor(async () => (await counts(ids)).every((n) => n > 0), { timeoutMs: 8000 });
    await onePollLater('standby');
    expect(await counts(ids)).toEqual(Array(10).fill(1));
  });
});
