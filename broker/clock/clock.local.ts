import { ProtocolError } from '../../protocol/errors.js';
import type { Pool } from '../db/pool.js';
import type { Logger } from '../log.js';
import { PeriodicTask } from '../timing/periodic.js';
import {
  CLOCK_ROW_COLUMNS,
  type ClockRow,
  type ClockSink,
  type ClockStatus,
  type MeshClocks,
} from './clock.js';

interface RunningClock extends ClockRow {
  /** Set while this node ticks the clock. */
  ticker: PeriodicTask | undefined;
}

export interface LocalClocksOptions {
  pool: Pool;
  nodeId: string;
  tickMs: number;
  sink: ClockSink;
  log: Logger;
  /** Tells whether the mesh has sessions on this node (a clock pauses itself when it has none). */
  hasSessions: (meshId: string) => boolean;
  /** The meshes with sessions on this node now (their clocks start when this implementation does). */
  meshesHere: () => string[];
}

/**
 * Each node runs the clocks of the meshes its own peers use, from state it loaded into memory. The gap
 * on 2+ nodes: two nodes can each run "the" clock of a mesh (each bumps the epoch and believes it leads),
 * their ticks reach only their own peers, and both write ticks, so `tick` repeats and goes back.
 */
export class LocalClocks implements MeshClocks {
  private readonly clocks = new Map<string, RunningClock>();
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(private readonly options: LocalClocksOptions) {}

  set(meshId: string, speed: number): Promise<ClockStatus> {
    return this.serial(meshId, async () => {
      const clock = (await this.load(meshId)) ?? this.create(meshId, speed);
      clock.speed = speed;
      await this.save(meshId, clock);
      if (!clock.paused) await this.run(meshId, clock);
      return this.status(clock);
    });
  }

  pause(meshId: string): Promise<ClockStatus> {
    return this.serial(meshId, async () => {
      const clock = await this.existing(meshId);
      this.stop(clock);
      clock.paused = true;
      clock.autoPaused = false;
      await this.save(meshId, clock);
      return this.status(clock);
    });
  }

  resume(meshId: string): Promise<ClockStatus> {
    return this.serial(meshId, async () => {
      const clock = await this.existing(meshId);
      clock.paused = false;
      clock.autoPaused = false;
      await this.save(meshId, clock);
      await this.run(meshId, clock);
      return this.status(clock);
    });
  }

  get(meshId: string): Promise<ClockStatus> {
    return this.serial(meshId, async () => this.status(await this.existing(meshId)));
  }

  meshActive(meshId: string): Promise<void> {
    return this.serial(meshId, async () => {
      const clock = await this.load(meshId);
      if (!clock || clock.paused || clock.ticker) return;
      clock.autoPaused = false;
      await this.run(meshId, clock);
    });
  }

  meshIdle(meshId: string): Promise<void> {
    return this.serial(meshId, async () => {
      const clock = this.clocks.get(meshId);
      if (!clock?.ticker || this.options.hasSessions(meshId)) return;
      this.stop(clock);
      clock.autoPaused = true;
      await this.save(meshId, clock);
    });
  }

  ledHere(): number {
    return [...this.clocks.values()].filter((clock) => clock.ticker).length;
  }

  /** Runs the clocks of the meshes this node has sessions of, each from its row. */
  async activate(): Promise<void> {
    for (const meshId of this.options.meshesHere()) await this.meshActive(meshId);
  }

  /** Stops every clock here and forgets them: whoever runs them next starts from their rows. */
  async deactivate(): Promise<void> {
    for (const clock of this.clocks.values()) this.stop(clock);
    this.clocks.clear();
  }

  async close(): Promise<void> {}

  /** One operation at a time per mesh: a tick, a set and a pause never interleave. */
  private serial<T>(meshId: string, work: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(meshId) ?? Promise.resolve();
    const next = previous.then(work, work);
    this.locks.set(
      meshId,
      next.catch(() => {}),
    );
    return next;
  }

  private create(meshId: string, speed: number): RunningClock {
    const clock: RunningClock = {
      speed,
      paused: false,
      autoPaused: false,
      tick: 0,
      simTimeMs: Date.now(),
      epoch: 0,
      leaderNode: null,
      ticker: undefined,
    };
    this.clocks.set(meshId, clock);
    return clock;
  }

  private async existing(meshId: string): Promise<RunningClock> {
    const clock = await this.load(meshId);
    if (!clock) throw new ProtocolError('not_found', 'this mesh has no clock yet (clock.set creates it)');
    return clock;
  }

  /** The clock from memory, or from its persisted row the first time this node touches it. */
  private async load(meshId: string): Promise<RunningClock | undefined> {
    const known = this.clocks.get(meshId);
    if (known) return known;
    const result = await this.options.pool.query<ClockRow>(
      `SELECT ${CLOCK_ROW_COLUMNS} FROM mesh_clocks WHERE mesh_id = $1`,
      [meshId],
    );
    const row = result.rows[0];
    if (!row) return undefined;
    const clock: RunningClock = { ...row, ticker: undefined };
    this.clocks.set(meshId, clock);
    return clock;
  }

  private async save(meshId: string, clock: RunningClock): Promise<void> {
    await this.options.pool.query(
      `INSERT INTO mesh_clocks (mesh_id, speed, paused, auto_paused, tick, sim_time_ms, epoch, leader_node, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now())
       ON CONFLICT (mesh_id) DO UPDATE SET speed = $2, paused = $3, auto_paused = $4, tick = $5, sim_time_ms = $6,
         epoch = $7, leader_node = $8, updated_at = now()`,
      [
        meshId,
        clock.speed,
        clock.paused,
        clock.autoPaused,
        clock.tick,
        clock.simTimeMs,
        clock.epoch,
        clock.leaderNode,
      ],
    );
  }

  /** Starts ticking on this node, taking the next epoch (this node now believes it leads the clock). */
  private async run(meshId: string, clock: RunningClock): Promise<void> {
    if (clock.ticker) return;
    clock.epoch += 1;
    clock.leaderNode = this.options.nodeId;
    await this.save(meshId, clock);
    clock.ticker = new PeriodicTask({
      everyMs: this.options.tickMs,
      // Not awaited: ticks queue up behind the mesh's other clock work (`serial`) instead of being skipped.
      run: () => {
        this.serial(meshId, () => this.tick(meshId, clock)).catch((error) =>
          this.options.log.warn({ err: error, meshId }, 'clock tick failed'),
        );
      },
      onError: { log: this.options.log, message: 'clock tick failed', fields: { meshId } },
    });
    clock.ticker.start();
  }

  private stop(clock: RunningClock): void {
    void clock.ticker?.stop();
    clock.ticker = undefined;
  }

  private async tick(meshId: string, clock: RunningClock): Promise<void> {
    if (!clock.ticker) return;
    clock.tick += 1;
    clock.simTimeMs += Math.round(clock.speed * this.options.tickMs);
    await this.options.pool.query(
      'UPDATE mesh_clocks SET tick = $2, sim_time_ms = $3, updated_at = now() WHERE mesh_id = $1',
      [meshId, clock.tick, clock.simTimeMs],
    );
    this.options.sink(meshId, {
      type: 'clock.tick',
      tick: clock.tick,
      simTime: new Date(clock.simTimeMs).toISOString(),
      speed: clock.speed,
      epoch: clock.epoch,
    });
  }

  private status(clock: RunningClock): ClockStatus {
    return {
      speed: clock.speed,
      paused: clock.paused || clock.autoPaused,
      tick: clock.tick,
      simTime: new Date(clock.simTimeMs).toISOString(),
      leader: clock.ticker ? this.options.nodeId : clock.leaderNode,
      epoch: clock.epoch,
    };
  }
}
