/**
 * The history of a chaos or load run, à la Jepsen: one JSON object per line, one line per event, in the
 * order they happened in the recording process (docs/chaos.md § History). This module is the whole
 * contract between the code that records a run and the checkers that judge it (cli/checkers/): they share
 * nothing else, so a checker cannot inherit the driver's mistakes.
 *
 * `type`: `invoke` (an operation starts), `ok` (it happened), `fail` (it certainly did not), `info` (it may
 * or may not have: a timeout; also facts that are not requests, e.g. a fault or an audit entry).
 * `process`: who did it (a peer session's name, `nemesis` for faults and flag flips, `audit` for the chain).
 * `time`: ms since the run started (monotonic). `index`: 0, 1, 2… in file order.
 */

export const EVENT_TYPES = ['invoke', 'ok', 'fail', 'info'] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** The operations a history holds; a checker ignores the ones it does not judge. */
export const OPERATIONS = [
  'send',
  'deliver',
  'ack',
  'stream-publish',
  'stream-receive',
  'schedule-create',
  'schedule-fire',
  'clock-tick',
  'session-welcome',
  'mcp-call',
  'mcp-result',
  'watch-create',
  'watch-change',
  'watch-fire',
  'audit-append',
  'flag-flip',
  'fault',
] as const;
export type Operation = (typeof OPERATIONS)[number];

export interface HistoryEvent {
  type: EventType;
  f: Operation;
  process: string;
  time: number;
  value: Record<string, unknown>;
  index: number;
}

/** What the recorder gives; the writer adds `time` and `index`. */
export type NewEvent = Omit<HistoryEvent, 'time' | 'index'>;

/** A line that is not a history event: the checker stops there (exit 2), naming the line. */
export class HistoryFormatError extends Error {
  constructor(
    readonly line: number,
    reason: string,
  ) {
    super(`line ${line}: ${reason}`);
  }
}

const TYPES = new Set<string>(EVENT_TYPES);
const OPS = new Set<string>(OPERATIONS);

/** One line → one event, or a HistoryFormatError saying what is wrong with it. */
export function parseEvent(text: string, line: number): HistoryEvent {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new HistoryFormatError(line, `not JSON (${(error as Error).message})`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new HistoryFormatError(line, 'not a JSON object');
  const e = raw as Record<string, unknown>;
  if (typeof e.type !== 'string' || !TYPES.has(e.type))
    throw new HistoryFormatError(line, `"type" must be one of ${EVENT_TYPES.join(', ')}`);
  if (typeof e.f !== 'string' || !OPS.has(e.f))
    throw new HistoryFormatError(line, `"f" must be one of ${OPERATIONS.join(', ')}`);
  if (typeof e.process !== 'string' || e.process === '')
    throw new HistoryFormatError(line, '"process" must be a non-empty string');
  if (typeof e.time !== 'number' || !Number.isFinite(e.time) || e.time < 0)
    throw new HistoryFormatError(line, '"time" must be a number ≥ 0 (ms since the run started)');
  if (typeof e.index !== 'number' || !Number.isInteger(e.index) || e.index < 0)
    throw new HistoryFormatError(line, '"index" must be a whole number ≥ 0');
  if (typeof e.value !== 'object' || e.value === null || Array.isArray(e.value))
    throw new HistoryFormatError(line, '"value" must be a JSON object');
  return e as unknown as HistoryEvent;
}

/** Field readers for checkers: a missing or mistyped field is a format error of that line. */
export function str(event: HistoryEvent, field: string, line: number): string {
  const v = event.value[field];
  if (typeof v !== 'string' || v === '')
    throw new HistoryFormatError(line, `${event.f}: value.${field} must be a non-empty string`);
  return v;
}

export function num(event: HistoryEvent, field: string, line: number): number {
  const v = event.value[field];
  if (typeof v !== 'number' || !Number.isFinite(v))
    throw new HistoryFormatError(line, `${event.f}: value.${field} must be a number`);
  return v;
}

export function strings(event: HistoryEvent, field: string, line: number): string[] {
  const v = event.value[field];
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string'))
    throw new HistoryFormatError(line, `${event.f}: value.${field} must be an array of strings`);
  return v as string[];
}
