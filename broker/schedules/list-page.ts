/**
 * One page of `schedule.list` (docs/protocol.md § Scheduled messages), bounded by construction: at most
 * LIST_PAGE_MAX_BYTES of JSON (broker/paging.ts), so a member's 100 schedules of 32 KiB bodies are not one 3 MiB reply.
 *
 * Pages go soonest first, and the cursor is the last entry's (nextFireAt, scheduleId). A schedule's next
 * fire time only ever moves later, so one not yet listed can never fall behind the cursor: every active
 * schedule is on some page; one that fired between two pages may be listed twice (same scheduleId).
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { ScheduleInfo } from '../../protocol/frames.js';
import { fillByBytes } from '../paging.js';

interface Position {
  nextFireAt: number;
  scheduleId: string;
}

/** Where an entry sorts; a schedule with no next fire time sorts last (as in SQL). */
function positionOf(schedule: ScheduleInfo): Position {
  return { nextFireAt: schedule.nextFireAt ?? Number.MAX_SAFE_INTEGER, scheduleId: schedule.scheduleId };
}

function after(a: Position, b: Position): boolean {
  return a.nextFireAt > b.nextFireAt || (a.nextFireAt === b.nextFireAt && a.scheduleId > b.scheduleId);
}

export function encodeCursor(position: Position): string {
  return `${position.nextFireAt}:${position.scheduleId}`;
}

function decodeCursor(cursor: string): Position {
  const match = /^(\d{1,16}):([0-9a-f-]{36})$/.exec(cursor);
  if (!match) throw new ProtocolError('bad_request', 'field "cursor" must be the "next" of a previous page');
  return { nextFireAt: Number(match[1]), scheduleId: match[2]! };
}

/** The page after `cursor` of a member's active schedules (any order in; sorted here). */
export function schedulePage(
  schedules: ScheduleInfo[],
  cursor: string | undefined,
): { schedules: ScheduleInfo[]; next?: string } {
  const from = cursor === undefined ? undefined : decodeCursor(cursor);
  const sorted = schedules
    .filter((schedule) => from === undefined || after(positionOf(schedule), from))
    .sort((a, b) => (after(positionOf(a), positionOf(b)) ? 1 : after(positionOf(b), positionOf(a)) ? -1 : 0));
  const { entries, last } = fillByBytes(sorted);
  return last === undefined
    ? { schedules: entries }
    : { schedules: entries, next: encodeCursor(positionOf(last)) };
}
