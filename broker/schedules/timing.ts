/** Cron and time-zone arithmetic of scheduled messages, through croner (time zones, DST). */
import { Cron } from 'croner';

export function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

/** Why `expression` is not a usable 5-field cron in `tz`, or undefined when it is. */
export function cronProblem(expression: string, tz: string): string | undefined {
  const fields = expression.trim().split(/\s+/);
  if (fields.length !== 5)
    return `cron must have exactly 5 fields (minute hour day month weekday), got ${fields.length}`;
  if (!isTimeZone(tz)) return `unknown time zone "${tz}"`;
  try {
    const next = new Cron(expression, { timezone: tz, paused: true }).nextRun();
    if (!next) return 'cron never fires';
  } catch (error) {
    return (error as Error).message.replace(/^CronPattern: /, '');
  }
  return undefined;
}

/** The first occurrence of `expression` in `tz` strictly after `after`, or null if there is none. */
export function nextCronRun(expression: string, tz: string, after: Date): Date | null {
  return new Cron(expression, { timezone: tz, paused: true }).nextRun(after);
}

/** setTimeout holds at most 2^31-1 ms (~24.8 days); longer waits are chained through re-arming. */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * The later of two instants: the next occurrence is computed after the one that just fired, even when this
 * node's clock lags the database's (which decided it was due), so an occurrence never fires twice.
 */
export function laterOf(a: Date, b: Date | null): Date {
  return b && b.getTime() > a.getTime() ? b : a;
}
