import type { Lifecycle } from '../rows/lifecycle.js';
/**
 * The scheduler: who arms and fires scheduled messages (docs/design.md §2, row "scheduledMessages").
 *
 * Contract:
 * - Each occurrence becomes one durable message from the creator (`fire`), even while the creator is
 *   offline, then is recorded in the schedule's row.
 * - `created` / `cancelled` tell the scheduler about changes made through this node.
 * - Implementations differ in who fires: see scheduler.local.ts for the single-node gap.
 */
import type { Schedule } from './store.js';

/** Turns one occurrence into a durable message and records it; never throws (logs and counts). */
export type FireOccurrence = (schedule: Schedule, occurrence: number) => Promise<void>;

export interface Scheduler extends Lifecycle {
  /** A schedule made through this node (ignored while this node does not run the scheduler). */
  created(schedule: Schedule): void;
  cancelled(scheduleId: string): void;
}
