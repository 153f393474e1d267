/**
 * The state rows of the inventory (docs/design.md §2) as this node runs them: each row is defined in its
 * own folder (`<folder>/row.ts`: flag, implementations, hand-over, metric family, session hooks, relays);
 * this file lists them in start order and adds the little wiring that is truly cross-row (which rows a
 * row delivers or audits through). Modules never read flags and never know each other.
 */

import type { AuditLog } from './audit/audit.js';
import { auditRow } from './audit/row.js';
import type { MeshClocks } from './clock/clock.js';
import { clockRow } from './clock/row.js';
import type { ConnectionCap } from './connection-cap/connection-cap.js';
import { connectionCapRow } from './connection-cap/row.js';
import type { Delivery } from './delivery/delivery.js';
import { deliveryRow } from './delivery/row.js';
import { activeLeaseRow } from './lease/row.js';
import type { McpRegistry } from './mcp/mcp.js';
import { mcpRow } from './mcp/row.js';
import type { Presence } from './presence/presence.js';
import { presenceRow } from './presence/row.js';
import type { RateLimits } from './rate-limits/rate-limits.js';
import { rateLimitsRow } from './rate-limits/row.js';
import type { Regions } from './regions/regions.js';
import { regionsRow } from './regions/row.js';
import type { RowContext } from './rows/context.js';
import type { Lifecycle } from './rows/lifecycle.js';
import { RowReconciler } from './rows/reconciler.js';
import { buildRow, type ManagedRow, type RowInfo, type SessionHooks } from './rows/row.js';
import { schedulerRow } from './schedules/row.js';
import type { Scheduler } from './schedules/scheduler.js';
import { streamsRow } from './streams/row.js';
import type { Streams } from './streams/streams.js';
import { watchesRow } from './watches/row.js';
import type { WatchRunner } from './watches/runner.js';

/** What the node's code uses: each forwards to the implementation its row's flag selects. */
export interface StateModules {
  regions: Regions;
  presence: Presence;
  delivery: Delivery;
  cap: ConnectionCap;
  limits: RateLimits;
  streams: Streams;
  clocks: MeshClocks;
  mcp: McpRegistry;
  scheduler: Scheduler;
  watches: WatchRunner;
  audit: AuditLog;
}

export interface NodeModules {
  modules: StateModules;
  /** Every row in start order (the reconciler stops them in reverse). */
  rows: ManagedRow[];
  /** Owns what runs where: flags × the active lease. */
  reconciler: RowReconciler;
  /** Each row's session hooks, in row order. */
  sessionHooks: SessionHooks[];
}

/** Every row definition, in start order: the inventory as code (checked by tests/unit/state-inventory.test.ts). */
export const STATE_ROWS: readonly RowInfo[] = [
  regionsRow,
  presenceRow,
  rateLimitsRow,
  connectionCapRow,
  auditRow,
  deliveryRow,
  streamsRow,
  mcpRow,
  clockRow,
  activeLeaseRow,
  schedulerRow,
  watchesRow,
];

export function createModules(context: RowContext): NodeModules {
  const infrastructure = { bus: context.bus, log: context.log };
  const build = <T extends Lifecycle, D>(definition: Parameters<typeof buildRow<T, D>>[0], deps: D) =>
    buildRow(definition, deps, infrastructure);

  // Start order: presence first (hellos need it), the recorders before what records through them, the
  // gate before the background rows it governs. Shutdown runs the other way: background work stops
  // before the lease is given up (a standby must not start firing while this node still fires), the
  // audit log drains after everything that records, presence goes last.
  // Regions first: the rows that list or claim read and decide through its view.
  const regionsBuilt = build(regionsRow, context);
  const regions = regionsBuilt.view;
  const presence = build(presenceRow, { ...context, regions });
  const limits = build(rateLimitsRow, context);
  const cap = build(connectionCapRow, context);
  const audit = build(auditRow, context);
  const delivery = build(deliveryRow, context);
  const streams = build(streamsRow, { ...context, regions });
  const mcp = build(mcpRow, { ...context, regions });
  const clocks = build(clockRow, { ...context, regions });
  const gate = build(activeLeaseRow, context);
  // Occurrences and watch notifications take from the send limit, as a `send` does.
  const scheduler = build(schedulerRow, {
    ...context,
    delivery: delivery.view,
    audit: audit.view,
    limits: limits.view,
    regions,
  });
  const watches = build(watchesRow, {
    ...context,
    delivery: delivery.view,
    limits: limits.view,
    regions,
  });
  context.metrics.clocksLedBy(() => clocks.view.ledHere());

  const rows: ManagedRow[] = [
    regionsBuilt,
    presence,
    limits,
    cap,
    audit,
    delivery,
    streams,
    mcp,
    clocks,
    gate,
    scheduler,
    watches,
  ];
  return {
    modules: {
      regions,
      presence: presence.view,
      limits: limits.view,
      cap: cap.view,
      audit: audit.view,
      delivery: delivery.view,
      streams: streams.view,
      mcp: mcp.view,
      clocks: clocks.view,
      scheduler: scheduler.view,
      watches: watches.view,
    },
    rows,
    reconciler: new RowReconciler({ rows, gate, log: context.log, metrics: context.metrics }),
    sessionHooks: rows.map((row) => row.hooks),
  };
}
