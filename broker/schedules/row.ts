/**
 * Row "scheduledMessages" (flag `ha.schedules`, docs/schedules.md): who arms and fires scheduled
 * messages. Background work: while local, it runs only where the active lease allows it.
 */
import { auditRow } from '../audit/row.js';
import { deliveryRow } from '../delivery/row.js';
import { rateLimitsRow } from '../rate-limits/row.js';
import { regionsRow } from '../regions/row.js';
import { defineRow, type RowParts } from '../rows/row.js';
import { fireOccurrence } from './fire.js';
import type { Scheduler } from './scheduler.js';
import { LocalScheduler } from './scheduler.local.js';
import { SharedScheduler } from './scheduler.shared.js';

export const schedulerRow = defineRow({
  name: 'schedules',
  flag: 'ha.schedules',
  metric: 'mesh_broker_schedule_fires_total',
  doc: 'docs/schedules.md',
  background: true,
  uses: ['config', 'pool', 'log', 'metrics', 'schedules'],
  // Occurrences are sent as a `send` is (delivery's store and wake-ups), take from the send limit
  // (docs/schedules.md § Send limit) and are audited; regions say who fires.
  needs: { delivery: deliveryRow, audit: auditRow, limits: rateLimitsRow, regions: regionsRow },
  build: ({
    config,
    pool,
    log,
    metrics,
    schedules,
    delivery,
    audit,
    limits,
    regions,
  }): RowParts<Scheduler> => {
    const fireOptions = {
      messages: delivery.messages,
      delivery: delivery.view,
      audit: audit.view,
      limits: limits.view,
      metrics,
      log,
    };
    return {
      local: new LocalScheduler(schedules, fireOccurrence(fireOptions), log),
      shared: new SharedScheduler({
        ...fireOptions,
        pool,
        store: schedules,
        nodeId: config.nodeId,
        pollMs: config.schedulePollMs,
        homeRule: regions.view,
      }),
    };
  },
});
