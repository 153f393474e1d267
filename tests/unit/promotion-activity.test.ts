/**
 * The promotion activity's reading of the audit chain (cli/promotion/activity.ts `lastAnalysis`): which
 * events make the last run, how each stage ended, the measurements per stage and metric; and the shadow
 * agreement merged over nodes (cli/cluster/shadow-agreement.ts `mergeShadowReports`).
 */
import { describe, expect, it } from 'vitest';
import { mergeShadowReports } from '../../cli/cluster/shadow-agreement.js';
import { lastAnalysis } from '../../cli/promotion/activity.js';

let id = 0;
const event = (eventType: string, payload: Record<string, unknown> = {}) => ({
  id: String(++id),
  eventType,
  actor: 'alice',
  payload: { environment: 'staging', from: 1, to: 2, ...payload },
  at: new Date(Date.UTC(2026, 0, 1, 0, 0, id)),
});
const measured = (stage: string, metric: string, index: number, outcome: string, values?: number[]) =>
  event('promotion.analysis.measurement', {
    stage,
    metric,
    index,
    count: 3,
    outcome,
    detail: 'd',
    at: `2026-01-01T00:00:${String(id + 1).padStart(2, '0')}.000Z`,
    ...(values ? { values } : {}),
  });
const inconclusive = (stage: string, metric: string) => ({
  analysis: { stage, status: 'inconclusive', metric, reason: `${metric}: no data` },
});

describe('lastAnalysis', () => {
  it('is null without a measurement', () => {
    expect(lastAnalysis([event('promotion.promoted')], false)).toBeNull();
  });

  it('a baseline still measuring under the lock is running; without the lock it is unfinished', () => {
    const events = [
      measured('baseline', 'old', 1, 'failed', [9]),
      event('promotion.blocked', {
        analysis: { stage: 'baseline', status: 'failed', metric: 'old', reason: 'x' },
      }),
      measured('baseline', 'latency', 1, 'successful', [0.01]),
      measured('baseline', 'errors', 1, 'inconclusive'),
      measured('baseline', 'latency', 2, 'successful', [0.02]),
    ];
    const running = lastAnalysis(events, true)!;
    expect(running.outcome).toBe('running');
    expect(running.stages).toEqual([{ stage: 'baseline', verdict: 'running' }]);
    // The blocked run before it is not part of it.
    expect(running.metrics.map((m) => m.metric)).toEqual(['latency', 'errors']);
    expect(running.metrics[0]!.measurements.map((m) => [m.index, m.outcome, m.value])).toEqual([
      [1, 'successful', 0.01],
      [2, 'successful', 0.02],
    ]);
    expect(running.metrics[1]!.measurements[0]!.value).toBeNull();
    const killed = lastAnalysis(events, false)!;
    expect(killed.outcome).toBe('unfinished');
    expect(killed.stages[0]!.verdict).toBe('unfinished');
  });

  it('a baseline pause, resumed, then a successful bake: one run, promoted', () => {
    const events = [
      measured('baseline', 'latency', 1, 'inconclusive'),
      event('promotion.paused', inconclusive('baseline', 'latency')),
    ];
    const paused = lastAnalysis(events, false)!;
    expect(paused.outcome).toBe('paused');
    expect(paused.stages).toEqual([
      { stage: 'baseline', verdict: 'inconclusive', metric: 'latency', reason: 'latency: no data' },
    ]);
    events.push(
      event('promotion.resumed', { stage: 'baseline', metric: 'latency' }),
      measured('bake', 'latency', 1, 'successful', [0.01]),
    );
    expect(lastAnalysis(events, true)!.outcome).toBe('running');
    events.push(measured('bake', 'latency', 2, 'successful', [0.01]), event('promotion.promoted'));
    const done = lastAnalysis(events, false)!;
    expect(done.outcome).toBe('promoted');
    expect(done.phase).toBe('bake');
    expect(done.stages.map((s) => [s.stage, s.verdict, s.decided])).toEqual([
      ['baseline', 'inconclusive', 'resumed'],
      ['bake', 'successful', undefined],
    ]);
    expect(done.metrics.map((m) => `${m.stage} ${m.metric} ${m.measurements.length}`)).toEqual([
      'baseline latency 1',
      'bake latency 2',
    ]);
  });

  it('a failed bake names its metric; the rolled-back outcome ends the run', () => {
    const events = [
      measured('baseline', 'latency', 1, 'successful', [0.01]),
      measured('bake', 'latency', 1, 'failed', [0.3]),
      event('promotion.rolled-back', {
        reason: 'bake analysis failed: latency: 1 failed',
        analysis: { stage: 'bake', status: 'failed', metric: 'latency', reason: 'latency: 1 failed' },
      }),
      event('promotion.promoted', { from: 0, to: 1 }),
    ];
    const view = lastAnalysis(events, false)!;
    expect(view.outcome).toBe('rolled-back');
    expect(view.reason).toBe('bake analysis failed: latency: 1 failed');
    expect(view.stages.map((s) => [s.stage, s.verdict, s.metric])).toEqual([
      ['baseline', 'successful', undefined],
      ['bake', 'failed', 'latency'],
    ]);
  });
});

describe('mergeShadowReports', () => {
  const report = (flag: string, running: boolean, agree: number, disagree: number, at?: string) => ({
    flag: flag as 'ha.presence',
    running,
    agree,
    disagree,
    error: 0,
    skipped: 1,
    agreementRatio: null,
    mismatches: at ? [{ at, subject: `s ${at}`, outcome: 'disagree' as const, local: 1, shared: 2 }] : [],
  });

  it('sums each row over the nodes, merges the mismatches newest first, names a node that did not answer', () => {
    const merged = mergeShadowReports([
      {
        node: 'a',
        rows: [
          report('ha.presence', true, 3, 1, '2026-01-01T00:00:01Z'),
          { ...report('ha.schedules', false, 0, 0), skipped: 0 },
        ],
      },
      {
        node: 'b',
        rows: [
          report('ha.presence', true, 5, 1, '2026-01-01T00:00:02Z'),
          { ...report('ha.schedules', false, 0, 0), skipped: 0 },
        ],
      },
      { node: 'c', error: 'HTTP 401' },
    ]);
    // ha.schedules: shadowed nowhere, never compared: not listed.
    expect(merged.rows).toHaveLength(1);
    expect(merged.rows[0]).toMatchObject({
      flag: 'ha.presence',
      runningOn: ['a', 'b'],
      agree: 8,
      disagree: 2,
      skipped: 2,
    });
    expect(merged.rows[0]!.agreementRatio).toBeCloseTo(0.8);
    expect(merged.rows[0]!.mismatches.map((m) => m.node)).toEqual(['b', 'a']);
    expect(merged.unanswered).toEqual([{ node: 'c', error: 'HTTP 401' }]);
  });
});
