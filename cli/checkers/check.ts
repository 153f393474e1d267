/**
 * Runs every checker over one history file, streamed in one pass (each checker's structures are maps
 * keyed by the event's ids, so the time is linear in the history, plus a sort per chain and per
 * recipient), and reports what each judged, every anomaly with its operations, and the speed.
 * Imports only the history format and Node: nothing of the code that drove the run.
 */
import { performance } from 'node:perf_hooks';
import { readHistory } from '../history/read.js';
import { Anomalies, type Anomaly, type Checker } from './anomalies.js';
import { AuditChecker } from './audit.js';
import { ClockChecker } from './clock.js';
import { FeedChecker } from './feed.js';
import { McpChecker } from './mcp.js';
import { ScheduleChecker } from './schedules.js';
import { StreamChecker } from './streams.js';
import { WatchChecker } from './watches.js';

export interface CheckResult {
  ok: boolean;
  events: number;
  /** What each checker judged, one line each. */
  summaries: Record<string, string>;
  /** Anomalies by kind (all of them counted, the first MAX_PER_KIND of each in `anomalies`). */
  counts: Record<string, number>;
  anomalies: Anomaly[];
  seconds: number;
  operationsPerSecond: number;
}

export const newCheckers = (): Checker[] => [
  new FeedChecker(),
  new StreamChecker(),
  new ScheduleChecker(),
  new ClockChecker(),
  new AuditChecker(),
  new McpChecker(),
  new WatchChecker(),
];

/** Throws HistoryFormatError for a malformed line, the fs error for an unreadable file. */
export async function checkHistory(path: string): Promise<CheckResult> {
  const started = performance.now();
  const checkers = newCheckers();
  const events = await readHistory(path, (event, line) => {
    for (const checker of checkers) checker.add(event, line);
  });
  const anomalies = new Anomalies();
  const summaries: Record<string, string> = {};
  for (const checker of checkers) summaries[checker.name] = checker.finish(anomalies);
  const seconds = (performance.now() - started) / 1000;
  return {
    ok: anomalies.total === 0,
    events,
    summaries,
    counts: Object.fromEntries(anomalies.counts),
    anomalies: anomalies.kept,
    seconds,
    operationsPerSecond: Math.round(events / Math.max(seconds, 1e-6)),
  };
}
