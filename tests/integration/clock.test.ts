import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame } from '../../protocol/frames.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const TICK_MS = 100;
const env = { CLOCK_TICK_MS: String(TICK_MS), PRESENCE_GRACE_MS: '200' };
let db: TestDatabase;
let node: TestNode;

beforeAll(async () => {
  db = await createTestDatabase('clock');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url, env });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

type Tick = Frame & { tick: number; simTime: string; speed: number; epoch: number };
type Status = Frame & {
  speed: number;
  paused: boolean;
  tick: number;
  simTime: string;
  leader: string;
  epoch: number;
};

describe('mesh clock on one node', () => {
  it('refuses clock frames before the clock exists, and bad speeds', async () => {
    const mesh = await createMesh(node, 1);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    await expect(a.request({ type: 'clock.get' })).rejects.toThrow('not_found');
    await expect(a.request({ type: 'clock.pause' })).rejects.toThrow('not_found');
    for (const speed of [0, 101, 'fast', null]) {
      await expect(a.request({ type: 'clock.set', speed })).rejects.toThrow('bad_request');
    }
    const rows = await db.query('SELECT count(*)::int AS n FROM mesh_clocks WHERE mesh_id = $1', [
      mesh.meshId,
    ]);
    expect(rows.rows[0]?.n).toBe(0);
  });

  it('ticks to every session of the mesh, one by one, and persists each tick', async () => {
    const mesh = await createMesh(node, 2);
    const [a, b] = await Promise.all(mesh.members.map((m) => connectPeer(node.wsUrl, mesh, m)));
    const ticks: Record<string, Tick[]> = { a: [], b: [] };
    a!.on('frame', (f) => f.type === 'clock.tick' && ticks.a!.push(f as Tick));
    b!.on('frame', (f) => f.type === 'clock.tick' && ticks.b!.push(f as Tick));
    const status = await a!.request<Status>({ type: 'clock.set', speed: 10 });
    expect(status).toMatchObject({
      type: 'clock.status',
      speed: 10,
      paused: false,
      tick: 0,
      leader: node.nodeId,
    });
    await waitFor(() => ticks.a!.length >= 5 && ticks.b!.length >= 5);
    const seen = ticks.a!.slice(0, 5);
    expect(seen.map((t) => t.tick)).toEqual([1, 2, 3, 4, 5]);
    expect(ticks.b!.slice(0, 5).map((t) => t.tick)).toEqual([1, 2, 3, 4, 5]);
    // 10 simulated minutes per real minute: each 100 ms tick advances simulated time by 1 s.
    const start = Date.parse(status.simTime);
    for (const t of seen) expect(Date.parse(t.simTime) - start).toBe(t.tick * TICK_MS * 10);
    const row = await db.query('SELECT tick, speed FROM mesh_clocks WHERE mesh_id = $1', [mesh.meshId]);
    expect(row.rows[0]!.tick).toBeGreaterThanOrEqual(5);
  });

  it('pauses, resumes from the same tick, and changes speed', async () => {
    const mesh = await createMesh(node, 1);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    await a.request({ type: 'clock.set', speed: 1 });
    await a.next('frame', (f) => f.type === 'clock.tick' && (f as Tick).tick === 2);
    const paused = await a.request<Status>({ type: 'clock.pause' });
    expect(paused.paused).toBe(true);
    // Four tick periods, counted by a witness: another mesh's clock on the same node, which ticks on
    // (five ticks from its start span at least four periods).
    const witnessMesh = await createMesh(node, 1);
    const witness = await connectPeer(node.wsUrl, witnessMesh, witnessMesh.members[0]!);
    let ticked = 0;
    witness.on('frame', (f) => {
      if (f.type === 'clock.tick') ticked++;
    });
    await witness.request({ type: 'clock.set', speed: 1 });
    await waitFor(() => ticked >= 5, { what: "five ticks of the witness mesh's clock" });
    witness.close();
    expect((await a.request<Status>({ type: 'clock.get' })).tick).toBe(paused.tick);
    const next = a.next('frame', (f) => f.type === 'clock.tick');
    const resumed = await a.request<Status>({ type: 'clock.resume' });
    expect(resumed.paused).toBe(false);
    expect(((await next) as Tick).tick).toBe(paused.tick + 1);
    const faster = await a.request<Status>({ type: 'clock.set', speed: 60 });
    expect(faster.speed).toBe(60);
    const tick = (await a.next('frame', (f) => f.type === 'clock.tick')) as Tick;
    expect(tick.speed).toBe(60);
  });

  it('pauses itself when the mesh has no sessions, and a later runner continues from the last tick', async () => {
    const mesh = await createMesh(node, 1);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    await a.request({ type: 'clock.set', speed: 5 });
    await a.next('frame', (f) => f.type === 'clock.tick' && (f as Tick).tick === 3);
    a.close();
    const autoPaused = await waitFor(async () => {
      const r = await db.query('SELECT tick, auto_paused FROM mesh_clocks WHERE mesh_id = $1', [mesh.meshId]);
      return r.rows[0]?.auto_paused ? r.rows[0] : undefined;
    });
    // A new node (a later leader) picks the clock up from its row when a session of the mesh arrives.
    const later = await startNode({ kind: 'in-process', databaseUrl: db.url, env });
    try {
      const b = await connectPeer(later.wsUrl, mesh, mesh.members[0]!);
      const tick = (await b.next('frame', (f) => f.type === 'clock.tick')) as Tick;
      expect(tick.tick).toBe(Number(autoPaused.tick) + 1);
      const status = await b.request<Status>({ type: 'clock.get' });
      expect(status.leader).toBe(later.nodeId);
      expect(status.epoch).toBeGreaterThan(1);
    } finally {
      closeAllClients();
      await later.stop();
    }
  });
});
