/**
 * One page of `schedule.list` (docs/protocol.md § Scheduled messages), bounded by construction: at most
 * SCHEDULE_LIST_MAX_BYTES of JSON, so a member's 100 schedules of 32 KiB bodies are not one 3 MiB reply.
 *
 * Pages go soonest first, and the cursor is the last entry's (nextFireAt, scheduleId). A schedule's next
 * fire time only ever moves later, so one not yet listed can never fall behind the cursor: every active
 * schedule is on some page; one that fired between two pages may be listed twice (same scheduleId).
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { ScheduleInfo } from '../../protocol/frames.js';

export const SCHEDULE_LIST_MAX_BYTES = 256 * 1024;
/** Room kept for the envelope: type, `next`, `rid`. */
const ENVELOPE_BYTES = 1024;

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
    .map((schedule) => ({ schedule, position: positionOf(schedule) }))
    .filter(({ position }) => from === undefined || after(position, from))
    .sort((a, b) => (after(a.position, b.position) ? 1 : after(b.position, a.position) ? -1 : 0));
  const page: ScheduleInfo[] = [];
  let bytes = ENVELOPE_BYTES;
  for (const { schedule } of sorted) {
    bytes += Buffer.byteLength(JSON.stringify(schedule)) + 1;
    // Always one entry (a body is at most MAX_BODY_BYTES, far below the page), so paging moves on.
    if (page.length > 0 && bytes > SCHEDULE_LIST_MAX_BYTES) {
      const last = page[page.length - 1]!;
      return { schedules: page, next: encodeCursor(positionOf(last)) };
    }
    page.push(schedule);
  }
  return { schedules: page };
}
