/**
 * Row "scheduledMessages" (flag `ha.schedules`, docs/schedules.md): who arms and fires scheduled
 * messages. Background work: while local, it runs only where the active lease allows it. The row owns its
 * store, its frames (`schedule.create|cancel|list`) and the cancelling of a revoked member's schedules.
 */
import { auditRow } from '../audit/row.js';
import { deliveryRow } from '../delivery/row.js';
import { rateLimitsRow } from '../rate-limits/row.js';
import { regionsRow } from '../regions/row.js';
import { defineRow, type RowParts } from '../rows/row.js';
import { fireOccurrence } from './fire.js';
import { registerScheduleFrames } from './frames.js';
import type { Scheduler } from './scheduler.js';
import { LocalScheduler } from './scheduler.local.js';
import { SharedScheduler } from './scheduler.shared.js';
import { schedulesShadow } from './shadow.js';
import { ScheduleStore } from './store.js';

export const schedulerRow = defineRow({
  name: 'schedules',
  flag: 'ha.schedules',
  metric: 'mesh_broker_schedule_fires_total',
  doc: 'docs/schedules.md',
  background: true,
  uses: ['config', 'pool', 'log', 'metrics', 'directory'],
  // Occurrences are sent as a `send` is (delivery's store and wake-ups), take from the send limit
  // (docs/schedules.md § Send limit) and are audited; regions say where lists read and who fires.
  needs: { delivery: deliveryRow, audit: auditRow, limits: rateLimitsRow, regions: regionsRow },
  build: ({
    config,
    pool,
    log,
    metrics,
    directory,
    delivery,
    audit,
    limits,
    regions,
  }): RowParts<Scheduler> => {
    const store = new ScheduleStore(pool);
    const fireOptions = {
      messages: delivery.messages,
      delivery: delivery.view,
      audit: audit.view,
      limits: limits.view,
      metrics,
      log,
    };
    const local = new LocalScheduler(store, fireOccurrence(fireOptions), log);
    return {
      local,
      shadow: () => schedulesShadow({ local, pool, homeRule: regions.view }),
      shared: new SharedScheduler({
        ...fireOptions,
        pool,
        store,
        nodeId: config.nodeId,
        pollMs: config.schedulePollMs,
        homeRule: regions.view,
      }),
      frames: (routes, scheduler) =>
        registerScheduleFrames(routes, {
          store,
          lists: regions.view,
          scheduler,
          directory,
          audit: audit.view,
          maxPerMember: config.scheduleMaxPerMember,
          maxBodyBytes: config.maxBodyBytes,
        }),
      // Every scheduler re-reads a schedule before it fires it and skips a revoked member's: cancelling
      // them in Postgres stops them on every node.
      memberRevoked: async (member) => {
        await store.cancelMemberSchedules(member.id);
      },
    };
  },
});
