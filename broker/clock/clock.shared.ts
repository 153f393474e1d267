import { ProtocolError } from '../../protocol/errors.js';
import type { Bus } from '../bus/bus.js';
import type { Pool } from '../db/pool.js';
import type { Logger } from '../log.js';
import { planted } from '../plants.js';
import { type HomeRegionRule, NO_HOME_RULE } from '../regions/regions.js';
import { PeriodicTask } from '../timing/periodic.js';
import {
  CLOCK_ROW_COLUMNS,
  type ClockRow,
  type ClockSink,
  type ClockStatus,
  type ClockTickFrame,
  type MeshClocks,
} from './clock.js';
import { ClockLeadership } from './leadership.js';

interface Led {
  epoch: number;
  /** One tick at a time: a tick due while the last is still writing is skipped (the next catches up). */
  ticker: PeriodicTask;
}

export interface SharedClocksOptions {
  pool: Pool;
  databaseUrl: string;
  bus: Bus;
  nodeId: string;
  tickMs: number;
  /** How often a node with sessions of a mesh tries to lead its clock when nobody does. */
  retryMs: number;
  /** This node's sessions of the mesh. */
  toLocalSessions: ClockSink;
  hasSessions: (meshId: string) => boolean;
  /** The meshes with sessions on this node now (their clocks are competed for on activation). */
  meshesHere: () => string[];
  onTick: () => void;
  onFenced: () => void;
  /**
   * The home-region rule (`ha.regions`): a mesh it defers is not competed for here, and a clock led here
   * is given up once it defers (the home region's node then takes it). Default: nothing deferred.
   */
  homeRule?: HomeRegionRule;
  log: Logger;
}

/**
 * One clock leader per mesh (flag `ha.clock`). Nodes holding sessions of a mesh compete for a Postgres
 * session advisory lock on the mesh's clock (ClockLeadership); the winner bumps the clock's epoch and
 * ticks. Every tick is one fenced UPDATE (`WHERE epoch = <mine>`): once another node took over and bumped
 * the epoch, the old leader's writes are refused and it steps down, so `tick` never repeats or goes back.
 * A new leader continues from the last persisted tick. Ticks go to this node's sessions and over the bus to
 * the other nodes of the mesh. `clock.set/pause/resume/get` work from any node (they change the row; the
 * leader follows it). Nobody leads while no node has sessions of the mesh: the clock waits (auto-pause).
 * After a SIGKILL of the leader its lock goes with its connection; another node takes over within
 * `retryMs` plus Postgres noticing the closed connection.
 */
export class SharedClocks implements MeshClocks {
  private readonly led = new Map<string, Led>();
  private readonly wanted = new Set<string>();
  private readonly electing = new Map<string, Promise<void>>();
  /**
   * When an election here last read the mesh's row and did not lead (no clock, paused, or led elsewhere).
   * Within `retryMs` of it a session's start does not read the row again: the retry timer competes next.
   */
  private readonly lookedAt = new Map<string, number>();
  private readonly leadership: ClockLeadership;
  /** Competes again for every wanted mesh not led here (a lost election, a leader that died). */
  private readonly retry: PeriodicTask;

  constructor(private readonly options: SharedClocksOptions) {
    this.leadership = new ClockLeadership(
      options.databaseUrl,
      options.nodeId,
      1000,
      (lost) => this.lostLeadership(lost),
      options.log,
    );
    this.retry = new PeriodicTask({
      everyMs: options.retryMs,
      run: () => this.competeAll(),
      onError: { log: options.log, message: 'clock election round failed; retrying' },
    });
  }

  /** Starts competing for the clocks of the meshes this node holds sessions of (again after a flip). */
  async activate(): Promise<void> {
    this.leadership.open();
    this.retry.start();
    for (const meshId of this.options.meshesHere()) await this.meshActive(meshId);
  }

  async set(meshId: string, speed: number): Promise<ClockStatus> {
    await this.options.pool.query(
      `INSERT INTO mesh_clocks (mesh_id, speed, sim_time_ms) VALUES ($1, $2, $3)
       ON CONFLICT (mesh_id) DO UPDATE SET speed = excluded.speed, updated_at = now()`,
      [meshId, speed, Date.now()],
    );
    await this.compete(meshId);
    return this.get(meshId);
  }

  async pause(meshId: string): Promise<ClockStatus> {
    await this.update(meshId, 'paused = true, auto_paused = false');
    return this.get(meshId);
  }

  async resume(meshId: string): Promise<ClockStatus> {
    await this.update(meshId, 'paused = false, auto_paused = false');
    await this.compete(meshId);
    return this.get(meshId);
  }

  async get(meshId: string): Promise<ClockStatus> {
    const row = await this.row(meshId);
    if (!row) throw new ProtocolError('not_found', 'this mesh has no clock yet (clock.set creates it)');
    return {
      speed: row.speed,
      paused: row.paused || row.autoPaused,
      tick: row.tick,
      simTime: new Date(row.simTimeMs).toISOString(),
      leader: row.leaderNode,
      epoch: row.epoch,
    };
  }

  async meshActive(meshId: string): Promise<void> {
    this.wanted.add(meshId);
    // Sessions starting one after another (a drain moves thousands) would each read the row for an answer
    // known a moment ago; a leader that died meanwhile is taken over by the retry timer, as it would be
    // with no session starting. clock.set and clock.resume still compete at once.
    if (this.lookedRecently(meshId)) return;
    await this.compete(meshId);
  }

  private lookedRecently(meshId: string): boolean {
    const at = this.lookedAt.get(meshId);
    return at !== undefined && Date.now() - at < this.options.retryMs;
  }

  async meshIdle(meshId: string): Promise<void> {
    if (this.options.hasSessions(meshId)) return;
    this.wanted.delete(meshId);
    this.lookedAt.delete(meshId);
    if (!this.led.has(meshId)) return;
    await this.stepDown(meshId);
    // Nobody anywhere: the clock waits for the next session (and says so).
    await this.options.pool.query(
      `UPDATE mesh_clocks SET auto_paused = true WHERE mesh_id = $1
          AND NOT EXISTS (SELECT 1 FROM presence WHERE mesh_id = $1 AND disconnected_at IS NULL)`,
      [meshId],
    );
  }

  ledHere(): number {
    return this.led.size;
  }

  /** Stops ticking and gives every clock lock up: another node (or the local clocks) continues. */
  async deactivate(): Promise<void> {
    void this.retry.stop();
    for (const meshId of [...this.led.keys()]) this.stopTicking(meshId);
    this.wanted.clear();
    this.lookedAt.clear();
    await this.leadership.close();
  }

  async close(): Promise<void> {}

  private async row(meshId: string): Promise<ClockRow | undefined> {
    const result = await this.options.pool.query<ClockRow>(
      `SELECT ${CLOCK_ROW_COLUMNS} FROM mesh_clocks WHERE mesh_id = $1`,
      [meshId],
    );
    return result.rows[0];
  }

  private async update(meshId: string, set: string): Promise<void> {
    const result = await this.options.pool.query(
      `UPDATE mesh_clocks SET ${set}, updated_at = now() WHERE mesh_id = $1`,
      [meshId],
    );
    if (result.rowCount === 0)
      throw new ProtocolError('not_found', 'this mesh has no clock yet (clock.set creates it)');
  }

  private async competeAll(): Promise<void> {
    const rule = this.options.homeRule ?? NO_HOME_RULE;
    // Led here while its home region had no node with its sessions; that node is back: hand it over. The
    // next tick of the home node's election (its retry) takes the lock; the epoch fences this one anyway.
    for (const meshId of [...this.led.keys()]) {
      if (await rule.defers(meshId, 'clock')) {
        this.options.log.info({ meshId }, 'giving the mesh clock back to its home region');
        await this.stepDown(meshId);
      }
    }
    for (const meshId of this.wanted) await this.compete(meshId);
  }

  /**
   * Leads the mesh's clock if it has one, runs, and no other node holds it. One election at a time per
   * mesh: the retry timer and a session's start may ask together, and two elections would both bump the
   * epoch and both start ticking.
   */
  private compete(meshId: string): Promise<void> {
    const running = this.electing.get(meshId);
    if (running) return running;
    const election = this.elect(meshId).finally(() => this.electing.delete(meshId));
    this.electing.set(meshId, election);
    return election;
  }

  private async elect(meshId: string): Promise<void> {
    if (this.led.has(meshId) || !this.wanted.has(meshId)) return;
    try {
      if (await (this.options.homeRule ?? NO_HOME_RULE).defers(meshId, 'clock')) return;
      const row = await this.row(meshId);
      this.lookedAt.set(meshId, Date.now());
      if (!row || row.paused) return;
      if (!(await this.leadership.acquire(meshId))) return;
      const elected = await this.options.pool.query<{ epoch: number }>(
        `UPDATE mesh_clocks SET epoch = epoch + 1, leader_node = $2, auto_paused = false, updated_at = now()
          WHERE mesh_id = $1 RETURNING epoch`,
        [meshId, this.options.nodeId],
      );
      const epoch = elected.rows[0]?.epoch;
      if (epoch === undefined) {
        await this.leadership.release(meshId);
        return;
      }
      const led: Led = {
        epoch,
        ticker: new PeriodicTask({
          everyMs: this.options.tickMs,
          run: () => this.tick(meshId, led),
          onError: { log: this.options.log, message: 'clock tick failed', fields: { meshId } },
        }),
      };
      led.ticker.start();
      this.led.set(meshId, led);
      this.lookedAt.delete(meshId);
      this.options.log.info({ meshId, epoch }, 'leading the mesh clock');
    } catch (error) {
      this.options.log.warn({ err: error, meshId }, 'clock election failed; retrying');
    }
  }

  private async tick(meshId: string, led: Led): Promise<void> {
    if (this.led.get(meshId) !== led) return;
    // PLANTED BUG (tests only): the tick skips the epoch fence, so a deposed leader's ticks still count.
    const fence = planted('clock-unfenced') ? '$2::int IS NOT NULL' : 'epoch = $2';
    try {
      const result = await this.options.pool.query<ClockRow>(
        `UPDATE mesh_clocks SET tick = tick + 1, sim_time_ms = sim_time_ms + round(speed * $3)::bigint, updated_at = now()
          WHERE mesh_id = $1 AND ${fence} AND NOT paused
          RETURNING ${CLOCK_ROW_COLUMNS}`,
        [meshId, led.epoch, this.options.tickMs],
      );
      const row = result.rows[0];
      if (!row) {
        // Paused (anyone may pause), or fenced: another node leads under a newer epoch.
        const current = await this.row(meshId);
        if (current && current.epoch !== led.epoch) this.options.onFenced();
        await this.stepDown(meshId);
        return;
      }
      const frame: ClockTickFrame = {
        type: 'clock.tick',
        tick: row.tick,
        simTime: new Date(row.simTimeMs).toISOString(),
        speed: row.speed,
        epoch: row.epoch,
      };
      this.options.onTick();
      this.options.toLocalSessions(meshId, frame);
      void this.options.bus.publishToMesh(meshId, 'clock.tick', frame);
    } catch (error) {
      this.options.log.warn({ err: error, meshId }, 'clock tick failed');
    }
  }

  private stopTicking(meshId: string): void {
    const led = this.led.get(meshId);
    // Not awaited: a step-down may come from the tick in flight itself.
    void led?.ticker.stop();
    this.led.delete(meshId);
  }

  private async stepDown(meshId: string): Promise<void> {
    this.stopTicking(meshId);
    await this.leadership.release(meshId);
  }

  private lostLeadership(meshIds: string[]): void {
    for (const meshId of meshIds) this.stopTicking(meshId);
  }
}
