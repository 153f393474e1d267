import type { ClockStatus, ClockTick } from '../../protocol/frames.js';
import type { Lifecycle } from '../rows/lifecycle.js';

/**
 * Mesh clocks: one simulated clock per mesh (docs/design.md §2, row "meshClocks").
 *
 * Contract:
 * - `set` creates the mesh's clock or changes its speed (1…100 simulated minutes per real minute);
 *   `pause` / `resume` / `get` act on an existing clock (`not_found` otherwise).
 * - While running, each tick advances `tick` by exactly one and `simTime` by speed × tick interval, is
 *   persisted, and goes to every session of the mesh through the `ClockSink` as `clock.tick`.
 * - State (speed, paused, tick, simTime, epoch) lives in `mesh_clocks`, so whoever runs the clock next
 *   continues from the last persisted tick.
 * - A clock pauses by itself when its mesh has no sessions (`meshIdle`) and resumes with the next one
 *   (`meshActive`), unless a peer paused it.
 */
/** A clock's state as `clock.status` carries it (the protocol's type). */
export type { ClockStatus };
export type ClockTickFrame = ClockTick;

/** A `mesh_clocks` row as both implementations read it (columns: CLOCK_ROW_COLUMNS). */
export interface ClockRow {
  speed: number;
  paused: boolean;
  autoPaused: boolean;
  tick: number;
  simTimeMs: number;
  epoch: number;
  leaderNode: string | null;
}

export const CLOCK_ROW_COLUMNS = `speed, paused, auto_paused AS "autoPaused", tick, sim_time_ms AS "simTimeMs",
  epoch, leader_node AS "leaderNode"`;

export type ClockSink = (meshId: string, frame: ClockTickFrame) => void;

export interface MeshClocks extends Lifecycle {
  set(meshId: string, speed: number): Promise<ClockStatus>;
  pause(meshId: string): Promise<ClockStatus>;
  resume(meshId: string): Promise<ClockStatus>;
  get(meshId: string): Promise<ClockStatus>;
  meshActive(meshId: string): Promise<void>;
  meshIdle(meshId: string): Promise<void>;
  /** How many mesh clocks this node ticks now (with `ha.clock`: whose lock it holds). */
  ledHere(): number;
}
