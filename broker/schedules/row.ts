/**
 * Row "scheduledMessages" (flag `ha.schedules`, docs/schedules.md): who arms and fires scheduled
 * messages. Background work: while local, it runs only where the active lease allows it.
 */
import type { AuditLog } from '../audit/audit.js';
import type { Delivery } from '../delivery/delivery.js';
import type { RateLimits } from '../rate-limits/rate-limits.js';
import type { WithRegions } from '../regions/regions.js';
import type { RowContext } from '../rows/context.js';
import { defineRow } from '../rows/row.js';
import { fireOccurrence } from './fire.js';
import type { Scheduler } from './scheduler.js';
import { LocalScheduler } from './scheduler.local.js';
import { SharedScheduler } from './scheduler.shared.js';

export interface SchedulerDeps extends RowContext, WithRegions {
  delivery: Delivery;
  audit: AuditLog;
  /** The send limit every occurrence takes from (docs/schedules.md § Send limit). */
  limits: RateLimits;
}

export const schedulerRow = defineRow<Scheduler, SchedulerDeps>({
  flag: 'ha.schedules',
  metric: 'mesh_broker_schedule_fires_total',
  doc: 'docs/schedules.md',
  background: true,
  build: ({ config, pool, log, metrics, messages, schedules, delivery, audit, limits, regions }) => {
    const fireOptions = { messages, delivery, audit, limits, metrics, log };
    return {
      local: new LocalScheduler(schedules, fireOccurrence(fireOptions), log),
      shared: new SharedScheduler({
        ...fireOptions,
        pool,
        store: schedules,
        nodeId: config.nodeId,
        pollMs: config.schedulePollMs,
        homeRule: regions,
      }),
    };
  },
});
