/**
 * The MCP and watch checkers (cli/checkers/mcp.ts, watches.ts) over hand-written histories read back the
 * way `workbench chaos check` reads them: a clean history of each passes; each planted anomaly is caught
 * and named with its operations (before these checkers, `chaos check` had no `f` for either and refused
 * such a history as malformed). Also the chaos workload's rate rules: the probe's pass rule, the target
 * (25 % of the capacity, bounded) and the `workload` property failing on a kind that accepted nothing.
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { PROBE_P99_BOUND_MS, stepPassed } from '../../cli/chaos/capacity.js';
import { WORKLOAD_KINDS, workloadProperty, workloadReport } from '../../cli/chaos/workload-report.js';
import { ratesFor, targetFor } from '../../cli/chaos/workloads.js';
import { type CheckResult, checkHistory } from '../../cli/checkers/check.js';
import type { EventType, HistoryEvent, Operation } from '../../cli/history/format.js';

const dir = mkdtempSync(join(tmpdir(), 'checkers-mw-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

class History {
  readonly events: HistoryEvent[] = [];
  add(type: EventType, f: Operation, process: string, value: Record<string, unknown>): number {
    const index = this.events.length;
    this.events.push({ type, f, process, time: index * 10, value, index });
    return index;
  }
  /** A call of `n` by `caller` whose result frame (`result`, default the right echo) came `times` times. */
  call(caller: string, callId: string, n: number, options: { result?: unknown; times?: number } = {}) {
    const value = { mesh: 'm', caller: `${caller}-key`, callId, server: 's', tool: 'echo', args: { n } };
    const invoke = this.add('invoke', 'mcp-call', caller, value);
    const result = options.result ?? { echo: n, host: 'h' };
    for (let i = 0; i < (options.times ?? 1); i++)
      this.add('ok', 'mcp-result', caller, { mesh: 'm', caller: `${caller}-key`, callId, result });
    const ok = this.add('ok', 'mcp-call', caller, { ...value, result });
    return [invoke, ok];
  }
  change(url: string, value: string): number {
    return this.add('ok', 'watch-change', 'watch-target', { url, value });
  }
  fire(
    session: string,
    watchId: string,
    url: string,
    oldValue: string | null,
    newValue: string,
    messageId: string,
  ) {
    return this.add('ok', 'watch-fire', session, { mesh: 'm', watchId, url, oldValue, newValue, messageId });
  }
  async check(): Promise<CheckResult> {
    const path = join(dir, `h-${readdirSync(dir).length}.jsonl`);
    writeFileSync(path, this.events.map((e) => `${JSON.stringify(e)}\n`).join(''));
    return checkHistory(path);
  }
}

const URL_A = 'http://127.0.0.1:1/w1';

/** Two watcher sessions of one member, a watch, three values; each change notified once (seen by both). */
function watches(plant?: (h: History) => void): History {
  const h = new History();
  h.add('invoke', 'watch-create', 'creator', { mesh: 'm', url: URL_A, mode: 'json', intervalSec: 5 });
  h.change(URL_A, 'w1-1');
  h.add('ok', 'watch-create', 'creator', {
    mesh: 'm',
    url: URL_A,
    mode: 'json',
    intervalSec: 5,
    watchId: 'W',
  });
  h.change(URL_A, 'w1-2');
  for (const s of ['s1', 's2']) h.fire(s, 'W', URL_A, 'w1-1', 'w1-2', 'm-1');
  h.change(URL_A, 'w1-3');
  for (const s of ['s1', 's2']) h.fire(s, 'W', URL_A, 'w1-2', 'w1-3', 'm-2');
  plant?.(h);
  return h;
}

describe('mcp checker', () => {
  it('passes calls answered once with their own value, and calls that failed or never answered', async () => {
    const h = new History();
    h.call('c1', 'x1', 1);
    h.call('c2', 'x2', 2);
    const value = { mesh: 'm', caller: 'c1-key', callId: 'x3', server: 's', tool: 'echo', args: { n: 3 } };
    h.add('invoke', 'mcp-call', 'c1', value);
    h.add('info', 'mcp-call', 'c1', { ...value, error: 'disconnected' });
    const result = await h.check();
    expect(result.anomalies).toEqual([]);
    expect(result.summaries.mcp).toContain('3 calls (2 ok, 1 failed or indeterminate)');
  });

  it('names a result that came twice, a wrong value and a result for no call', async () => {
    const h = new History();
    const twice = h.call('c1', 'x1', 1, { times: 2 });
    const wrong = h.call('c2', 'x2', 2, { result: { echo: 7, host: 'h' } });
    const stray = h.add('ok', 'mcp-result', 'c1', {
      mesh: 'm',
      caller: 'c1-key',
      callId: 'nope',
      result: null,
    });
    const result = await h.check();
    expect(result.counts).toEqual({
      'mcp-result-twice': 1,
      'mcp-wrong-result': 1,
      'mcp-unexpected-result': 1,
    });
    const by = (kind: string) => result.anomalies.find((a) => a.kind === kind)!;
    expect(by('mcp-result-twice').operations).toEqual([twice[0]!, twice[0]! + 1, twice[0]! + 2]);
    expect(by('mcp-wrong-result').operations).toEqual(wrong);
    expect(by('mcp-unexpected-result').operations).toEqual([stray]);
  });
});

describe('watch checker', () => {
  it('passes each change notified once to every session, and a change never notified', async () => {
    const h = watches((h) => h.change(URL_A, 'w1-4'));
    const result = await h.check();
    expect(result.anomalies).toEqual([]);
    expect(result.summaries.watches).toBe('1 watches created ok, 4 changes, 2 notified, 4 fire events');
  });

  it('names a notification of a value the url never had (or not yet), and a backwards one', async () => {
    const result = await watches((h) => {
      h.fire('s1', 'W', URL_A, 'w1-3', 'w1-9', 'm-3');
      h.fire('s1', 'W', URL_A, 'w1-3', 'w1-1', 'm-4');
      h.fire('s1', 'W', URL_A, 'w1-3', 'w1-5', 'm-5');
      h.change(URL_A, 'w1-5');
    }).check();
    expect(result.counts).toEqual({ 'watch-phantom-fire': 3 });
  });

  it('names one change notified as two messages, and one message given to a session twice', async () => {
    const result = await watches((h) => {
      h.fire('s1', 'W', URL_A, 'w1-2', 'w1-3', 'm-2b');
      h.fire('s2', 'W', URL_A, 'w1-2', 'w1-3', 'm-2');
    }).check();
    expect(result.counts).toEqual({ 'watch-fired-twice': 1, 'watch-duplicate': 1 });
    expect(result.anomalies.find((a) => a.kind === 'watch-fired-twice')!.message).toContain('m-2, m-2b');
  });
});

describe('chaos workload rates', () => {
  it('a probe step passes with 90 % of the offer accepted, p99 within the bound and nothing lost', () => {
    const step = { offered: 100, accepted: 300, acceptedPerSecond: 95, p99Ms: PROBE_P99_BOUND_MS, lost: 0 };
    expect(stepPassed(step)).toBe(true);
    expect(stepPassed({ ...step, acceptedPerSecond: 89 })).toBe(false);
    expect(stepPassed({ ...step, p99Ms: PROBE_P99_BOUND_MS + 1 })).toBe(false);
    expect(stepPassed({ ...step, lost: 1 })).toBe(false);
  });

  it('targets 25 % of the capacity within its bounds, shared by the kinds', () => {
    expect(targetFor(200)).toBe(50);
    expect(targetFor(0)).toBe(7.5);
    expect(targetFor(10_000)).toBe(150);
    const rates = ratesFor(50);
    expect(rates.dm + rates.broadcast + rates.group).toBe(50);
    expect(rates.stream).toBeGreaterThan(0);
    expect(rates.mcp).toBeGreaterThan(0);
  });

  it('the workload property fails when a kind accepted nothing, and states capacity and target', () => {
    const accepted = Object.fromEntries(WORKLOAD_KINDS.map((k) => [k, 10])) as Record<
      (typeof WORKLOAD_KINDS)[number],
      number
    >;
    const base = {
      capacity: { dmPerSecond: 200, p99BoundMs: 500, steps: [] },
      targetPerSecond: 50,
      offered: ratesFor(50),
      entries: ['lb', 'n1'],
      durationMs: 10_000,
    };
    const ok = workloadProperty(workloadReport({ ...base, accepted }));
    expect(ok.ok).toBe(true);
    expect(ok.summary).toContain('capacity 200 DM/s');
    expect(ok.summary).toContain('target 50 durable sends/s (25 %), achieved 3/s');
    const idle = workloadProperty(workloadReport({ ...base, accepted: { ...accepted, watch: 0 } }));
    expect(idle.ok).toBe(false);
    expect(idle.problems).toEqual(['no watch was accepted']);
  });
});
