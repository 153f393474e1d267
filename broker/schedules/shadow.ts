/**
 * Shadow comparator of `ha.schedules` (docs/schedules.md § Shadow): after each schedule created or
 * cancelled through this node, the due set of the next HORIZON_MS is compared: the schedules the local
 * scheduler has armed to fire by then, against those the shared scheduler would find due by then (its
 * poll's query, read only: active, creator not revoked, mesh not left to its home region). A local
 * scheduler that is not running (a standby) is not compared. A pair read while an occurrence was being
 * fired is read again once, 50 ms later, before it counts as a mismatch.
 */
import type { Pool } from '../db/pool.js';
import type { HomeRegionRule } from '../regions/regions.js';
import type { RowShadow, ShadowSample } from '../shadow/shadow.js';
import type { LocalScheduler } from './scheduler.local.js';

export const HORIZON_MS = 60_000;
const SETTLE_MS = 50;

export interface ScheduleShadowOptions {
  local: LocalScheduler;
  pool: Pool;
  homeRule?: HomeRegionRule;
}

export function schedulesShadow(options: ScheduleShadowOptions): RowShadow {
  const sharedDue = async (until: number): Promise<string[]> => {
    const deferred = (await options.homeRule?.deferred('background')) ?? [];
    const due = await options.pool.query<{ id: string }>(
      `SELECT s.id FROM schedules s JOIN members m ON m.id = s.member_id
        WHERE s.cancelled_at IS NULL AND s.finished_at IS NULL AND s.next_fire_at <= to_timestamp($1 / 1000.0)
          AND m.revoked_at IS NULL AND s.mesh_id <> ALL ($2::uuid[])`,
      [until, deferred],
    );
    return due.rows.map((row) => row.id).sort();
  };
  const pair = async () => {
    const until = Date.now() + HORIZON_MS;
    return { local: options.local.dueBefore(until), shared: await sharedDue(until) };
  };
  return {
    observes: ['created', 'cancelled'],
    async start() {},
    async stop() {},
    async compare(): Promise<ShadowSample | undefined> {
      if (!options.local.running) return undefined;
      const subject = `due within ${HORIZON_MS / 1000} s`;
      const first = await pair();
      if (JSON.stringify(first.local) === JSON.stringify(first.shared)) return { subject, ...first };
      await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
      return { subject, ...(await pair()) };
    },
  };
}
