import type { Logger } from '../log.js';
import type { FireOccurrence, Scheduler } from './scheduler.js';
import type { Schedule, ScheduleStore } from './store.js';
import { laterOf, MAX_TIMER_MS, nextCronRun } from './timing.js';

/**
 * One timer per schedule in this node's memory. At boot it re-arms every active schedule of the
 * database, as the original broker did; an occurrence missed while the node was down fires once at
 * boot. The gaps on 2+ nodes: every node re-arms every schedule, so N nodes fire N copies of each
 * occurrence; and a cancel made on another node never reaches this node's timer.
 */
export class LocalScheduler implements Scheduler {
  private readonly timers = new Map<string, NodeJS.Timeout>();
  /** When each armed schedule fires next (ms since the epoch): what shadow mode compares. */
  private readonly armedFor = new Map<string, number>();
  /** Closed until started: a node arms nothing before it may run background work. */
  private closed = true;

  constructor(
    private readonly store: ScheduleStore,
    private readonly fire: FireOccurrence,
    private readonly log: Logger,
  ) {}

  /** Arms every active schedule of the database (this node may run background work now). */
  async activate(): Promise<void> {
    this.closed = false;
    for (const schedule of await this.store.active()) this.arm(schedule);
  }

  created(schedule: Schedule): void {
    this.arm(schedule);
  }

  cancelled(scheduleId: string): void {
    clearTimeout(this.timers.get(scheduleId));
    this.timers.delete(scheduleId);
    this.armedFor.delete(scheduleId);
  }

  /** Whether this node arms schedules now (activated: it may run background work). */
  get running(): boolean {
    return !this.closed;
  }

  /** The schedules armed to fire before `until` (ms since the epoch), by id: this node's due set. */
  dueBefore(until: number): string[] {
    return [...this.armedFor].flatMap(([id, at]) => (at <= until ? [id] : [])).sort();
  }

  async deactivate(): Promise<void> {
    this.closed = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.armedFor.clear();
  }

  async close(): Promise<void> {}

  private arm(schedule: Schedule): void {
    if (this.closed || !schedule.nextFireAt) return;
    clearTimeout(this.timers.get(schedule.scheduleId));
    const delay = Math.max(0, schedule.nextFireAt.getTime() - Date.now());
    // Beyond what one timer can hold, wake up early and arm again for the rest.
    const timer = setTimeout(
      () => (delay > MAX_TIMER_MS ? this.arm(schedule) : void this.due(schedule)),
      Math.min(delay, MAX_TIMER_MS),
    );
    timer.unref();
    this.timers.set(schedule.scheduleId, timer);
    this.armedFor.set(schedule.scheduleId, schedule.nextFireAt.getTime());
  }

  private async due(schedule: Schedule): Promise<void> {
    this.timers.delete(schedule.scheduleId);
    this.armedFor.delete(schedule.scheduleId);
    if (this.closed) return;
    const occurrence = schedule.occurrences + 1;
    await this.fire(schedule, occurrence);
    const next = schedule.cron
      ? nextCronRun(schedule.cron, schedule.tz ?? 'UTC', laterOf(new Date(), schedule.nextFireAt))
      : null;
    let active = true;
    try {
      active = await this.store.fired(schedule.scheduleId, occurrence, next);
    } catch (error) {
      this.log.error({ err: error, scheduleId: schedule.scheduleId }, 'could not record a fired occurrence');
    }
    // Cancelled while it fired: the cancel found no timer to clear, so do not arm a new one.
    if (next && active) this.arm({ ...schedule, occurrences: occurrence, nextFireAt: next });
  }
}
