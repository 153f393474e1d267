/**
 * The state rows of the inventory (docs/design.md §2) as this node runs them: each row is a plugin defined
 * in its own folder (`<folder>/row.ts`: flag, implementations, hand-over, stores, frames, metric family,
 * session hooks, relays, and the services and rows it depends on); this file only lists them in start
 * order. Modules never read flags and know of other rows only what they declared they need.
 */

import type { AuditLog } from './audit/audit.js';
import { auditRow } from './audit/row.js';
import { clockRow } from './clock/row.js';
import type { ConnectionCap } from './connection-cap/connection-cap.js';
import { connectionCapRow } from './connection-cap/row.js';
import { deliveryRow } from './delivery/row.js';
import type { MessageStore } from './delivery/store.js';
import { activeLeaseRow } from './lease/row.js';
import { mcpRow } from './mcp/row.js';
import type { Presence } from './presence/presence.js';
import { presenceRow } from './presence/row.js';
import type { RateLimits } from './rate-limits/rate-limits.js';
import { rateLimitsRow } from './rate-limits/row.js';
import { regionsRow } from './regions/row.js';
import type { NodeServices } from './rows/context.js';
import { RowReconciler } from './rows/reconciler.js';
import type { AnyRow } from './rows/row.js';
import { RowSet } from './rows/row-set.js';
import { schedulerRow } from './schedules/row.js';
import { streamsRow } from './streams/row.js';
import { watchesRow } from './watches/row.js';

/**
 * Every row definition, in start order: the inventory as code (checked by tests/unit/state-inventory.test.ts).
 *
 * Regions first: the rows that list or claim read and decide through its view. Then presence (hellos need
 * it), the recorders before what records through them, the gate before the background rows it governs.
 * Shutdown runs the other way: background work stops before the lease is given up (a standby must not
 * start firing while this node still fires), the audit log drains after everything that records,
 * presence goes last. A row listed before a row it needs fails the node's start, naming both.
 */
export const STATE_ROWS: readonly AnyRow[] = [
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

/** What the node's own parts (its peer side, its HTTP side) use of the rows, beside the whole set. */
export interface NodeRows {
  set: RowSet;
  /** Owns what runs where: flags × the active lease. */
  reconciler: RowReconciler;
  presence: Presence;
  cap: ConnectionCap;
  limits: RateLimits;
  audit: AuditLog;
  messages: MessageStore;
}

export function createModules(services: NodeServices): NodeRows {
  const set = new RowSet(STATE_ROWS, services);
  const gate = set.get(activeLeaseRow);
  return {
    set,
    reconciler: new RowReconciler({ rows: set.rows, gate, log: services.log, metrics: services.metrics }),
    presence: set.get(presenceRow).view,
    cap: set.get(connectionCapRow).view,
    limits: set.get(rateLimitsRow).view,
    audit: set.get(auditRow).view,
    messages: set.get(deliveryRow).api.messages,
  };
}
