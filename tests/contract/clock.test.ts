/**
 * Contract of `MeshClocks` (broker/clock/clock.ts), against LocalClocks (one node, `ha.clock` off) and
 * SharedClocks (two nodes, on): `set` creates a clock or changes its speed, `pause` / `resume` / `get` need
 * one (`not_found`); while running every tick advances `tick` by exactly one and `simTime` by speed × the
 * tick interval, is persisted and reaches every session of the mesh; whoever runs the clock next continues
 * from the last persisted tick; the clock pauses by itself when its mesh has no sessions and resumes with
 * the next one, unless a peer paused it; and it keeps ticking, one by one, while the flag is flipped there
 * and back twice.
 */

import type { MeshClient } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import type { ClockStatus, ClockTick, Frame } from '../../protocol/frames.js';
import type { TestMesh } from '../helpers/mesh.js';
import { waitFor } from '../helpers/wait.js';
import { collect, flipSequence, useWorld, WORLDS } from './harness.js';

const TICK_MS = 100;
const GRACE_MS = 400;

type Status = Frame & ClockStatus;

/** Every way a run of ticks breaks the contract: a tick not one more than the last, a wrong simTime step. */
function tickProblems(ticks: ClockTick[], label: string): string[] {
  const problems: string[] = [];
  for (let i = 1; i < ticks.length; i++) {
    const [previous, tick] = [ticks[i - 1]!, ticks[i]!];
    if (tick.tick !== previous.tick + 1) problems.push(`${label}: tick ${previous.tick} then ${tick.tick}`);
    const step = Date.parse(tick.simTime) - Date.parse(previous.simTime);
    if (tick.tick === previous.tick + 1 && step !== tick.speed * TICK_MS)
      problems.push(`${label}: tick ${tick.tick} moved simTime by ${step} ms at speed ${tick.speed}`);
  }
  return problems;
}

describe.each(WORLDS)('MeshClocks contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.clock',
    env: { CLOCK_TICK_MS: String(TICK_MS), PRESENCE_GRACE_MS: String(GRACE_MS) },
  });

  const request = (client: MeshClient, type: string, fields: object = {}) =>
    client.request<Status>({ type, ...fields });

  /** Resolves once `client` saw `count` more ticks. */
  async function ticks(client: MeshClient, count: number): Promise<ClockTick[]> {
    const seen: ClockTick[] = [];
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`fewer than ${count} ticks within 10 s`)), 10_000);
      const off = client.on('frame', (f) => {
        if (f.type !== 'clock.tick') return;
        seen.push(f as unknown as ClockTick);
        if (seen.length === count) {
          clearTimeout(timer);
          off();
          resolve();
        }
      });
    });
    return seen;
  }

  /** A clock of another mesh, ticking: what a test waits on to let time pass without sleeping. */
  async function metronome() {
    const mesh = await world.mesh(1);
    const peer = await world.peer(world.a, mesh, mesh.members[0]!);
    await request(peer, 'clock.set', { speed: 1 });
    return { wait: (count: number) => ticks(peer, count) };
  }

  it('set creates the clock or changes its speed; pause, resume and get need a clock (not_found); any node answers', async () => {
    const mesh = await world.mesh(2);
    const a = await world.peer(world.a, mesh, mesh.members[0]!);
    const b = await world.peer(world.b, mesh, mesh.members[1]!);
    for (const type of ['clock.get', 'clock.pause', 'clock.resume']) {
      await expect(request(b, type)).rejects.toThrow('not_found');
    }
    const created = await request(a, 'clock.set', { speed: 10 });
    expect(created).toMatchObject({ type: 'clock.status', speed: 10, paused: false });
    expect(Date.parse(created.simTime)).not.toBeNaN();
    expect((await request(b, 'clock.get')).speed).toBe(10);
    expect((await request(b, 'clock.set', { speed: 60 })).speed).toBe(60);
    expect((await request(a, 'clock.get')).speed).toBe(60);
    for (const speed of [0, 101])
      await expect(request(a, 'clock.set', { speed })).rejects.toThrow('bad_request');
    await request(a, 'clock.pause');
  });

  it('while running, each tick advances tick by one and simTime by speed × interval, persisted, and reaches every session of the mesh on any node', async () => {
    const mesh = await world.mesh(2);
    const a = await world.peer(world.a, mesh, mesh.members[0]!);
    const b = await world.peer(world.b, mesh, mesh.members[1]!);
    const [atA, atB] = [collect<ClockTick>(a, 'clock.tick'), collect<ClockTick>(b, 'clock.tick')];
    await request(a, 'clock.set', { speed: 10 });
    await ticks(b, 4);
    await request(b, 'clock.set', { speed: 30 });
    await ticks(a, 4);
    const paused = await request(a, 'clock.pause');
    await waitFor(() => atA.at(-1)?.tick === paused.tick && atB.at(-1)?.tick === paused.tick, {
      what: 'the last tick before the pause at both sessions',
    });
    expect(tickProblems(atA, 'A')).toEqual([]);
    expect(tickProblems(atB, 'B')).toEqual([]);
    expect(atA.map((t) => t.tick)).toEqual(atB.map((t) => t.tick));
    expect(atA[0]!.tick).toBe(1);
    expect(new Set(atA.map((t) => t.speed))).toEqual(new Set([10, 30]));
    // Persisted: what get says is the last tick, its simTime and its epoch.
    const got = await request(b, 'clock.get');
    expect(got).toMatchObject({ paused: true, tick: atA.at(-1)!.tick, simTime: atA.at(-1)!.simTime });
    expect(atA.every((t) => t.epoch === got.epoch)).toBe(true);
  });

  it('a paused clock stays paused (no tick) until resumed; the next tick continues from the persisted one', async () => {
    const time = await metronome();
    const mesh = await world.mesh(2);
    const a = await world.peer(world.a, mesh, mesh.members[0]!);
    const b = await world.peer(world.b, mesh, mesh.members[1]!);
    await request(a, 'clock.set', { speed: 5 });
    await ticks(a, 3);
    const paused = await request(b, 'clock.pause');
    const during = collect<ClockTick>(a, 'clock.tick');
    await time.wait(5); // half a second of real time
    expect(during.filter((t) => t.tick > paused.tick)).toEqual([]);
    expect((await request(a, 'clock.get')).tick).toBe(paused.tick);
    const next = a.next('frame', (f) => f.type === 'clock.tick' && Number(f.tick) > paused.tick);
    expect((await request(a, 'clock.resume')).paused).toBe(false);
    expect((await next).tick).toBe(paused.tick + 1);
    await request(a, 'clock.pause');
  });

  it('pauses by itself when the mesh has no sessions and resumes with the next one, unless a peer paused it', async () => {
    const time = await metronome();
    const autoMesh = await world.mesh(2);
    const pausedMesh = await world.mesh(2);
    const first = await world.peer(world.a, autoMesh, autoMesh.members[0]!, { reconnect: false });
    const held = await world.peer(world.b, pausedMesh, pausedMesh.members[0]!, { reconnect: false });
    await request(first, 'clock.set', { speed: 10 });
    await request(held, 'clock.set', { speed: 10 });
    await ticks(first, 3);
    const heldAt = await request(held, 'clock.pause');
    const ended = async (mesh: TestMesh, client: MeshClient) => {
      client.close();
      await waitFor(
        async () => {
          const rows = await world.db.query('SELECT count(*)::int AS n FROM presence WHERE mesh_id = $1', [
            mesh.meshId,
          ]);
          return rows.rows[0]?.n === 0;
        },
        { what: 'the mesh to have no session' },
      );
    };
    await ended(autoMesh, first);
    await ended(pausedMesh, held);
    await time.wait(5);
    // The next session: the idle clock runs again from where it stopped; the paused one stays paused.
    const second = await world.peer(world.b, autoMesh, autoMesh.members[1]!);
    const status = await request(second, 'clock.get');
    const [next] = await ticks(second, 1);
    expect(next!.tick).toBe(status.tick + 1);
    expect((await request(second, 'clock.get')).paused).toBe(false);
    const again = await world.peer(world.a, pausedMesh, pausedMesh.members[1]!);
    const stillPaused = collect<ClockTick>(again, 'clock.tick');
    expect(await request(again, 'clock.get')).toMatchObject({ paused: true, tick: heldAt.tick });
    await time.wait(5);
    expect(stillPaused).toEqual([]);
    expect((await request(again, 'clock.get')).tick).toBe(heldAt.tick);
    await request(second, 'clock.pause');
  });

  it('flips ha.clock there and back twice: the clock keeps ticking, tick up by exactly one each time, never repeating', async () => {
    const mesh = await world.mesh(2);
    // The mesh's sessions on node A: with the flag off in the cluster each node would run its own copy of
    // the clock for its own sessions (the local gap); on one node that gap cannot show.
    const a = await world.peer(world.a, mesh, mesh.members[0]!);
    const observer = await world.peer(world.a, mesh, mesh.members[1]!);
    const seen = collect<ClockTick>(observer, 'clock.tick');
    await request(a, 'clock.set', { speed: 20 });
    await ticks(observer, 3);
    const epochs: number[] = [];
    for (const target of flipSequence(world)) {
      await world.flip(target);
      await ticks(observer, 5);
      epochs.push((await request(a, 'clock.get')).epoch);
    }
    const last = await request(a, 'clock.pause');
    await waitFor(() => seen.at(-1)?.tick === last.tick, { what: 'the last tick' });
    expect(tickProblems(seen, 'observer')).toEqual([]);
    expect(seen[0]!.tick).toBe(1);
    // A new runner after every flip takes a new epoch; ticks of one epoch never come after a later one.
    for (let i = 1; i < epochs.length; i++) expect(epochs[i]).toBeGreaterThan(epochs[i - 1]!);
    const order = seen.map((t) => t.epoch);
    expect([...order].sort((x, y) => x - y)).toEqual(order);
  }, 60_000);
});
