/**
 * `promote --junit`'s report: each span of time counted once, so the suites' times and `<testsuites>`'s add
 * up to the promotion's duration (a CI system sums them), not the checks' time twice.
 */
import { describe, expect, it } from 'vitest';
import { promotionSuites } from '../../cli/commands/promote.js';
import { junitXml } from '../../cli/report/junit.js';
import type { CheckResult } from '../../cli/smoke/run.js';

const check = (name: string, ms: number): CheckResult => ({
  name,
  flag: null,
  row: name,
  outcome: 'pass',
  expected: 'pass',
  met: true,
  ms,
  detail: '',
});

const times = (xml: string, element: string) =>
  [...xml.matchAll(new RegExp(`<${element} [^>]*time="([\\d.]+)"`, 'g'))].map((match) => Number(match[1]));

describe('promote --junit times', () => {
  it('the promotion case holds only its own steps; the suites and <testsuites> add up to the duration', () => {
    const started = Date.now() - 10_000;
    const runs = [
      { phase: 0, when: 'before' as const, timestamp: '', results: [check('a', 3000), check('b', 1000)] },
      { phase: 1, when: 'after' as const, timestamp: '', results: [check('a', 2500), check('b', 1500)] },
    ];
    const xml = junitXml(
      promotionSuites('local', 1, runs, started, { status: 'promoted', from: 0, reason: '' }, undefined),
    );
    const [total] = times(xml, 'testsuites');
    const suites = times(xml, 'testsuite');
    expect(suites.slice(0, 2)).toEqual([4, 4]);
    // 10 s in all, 8 s of it the checks: the promotion's own steps took about 2 s.
    expect(suites[2]).toBeGreaterThanOrEqual(2);
    expect(suites[2]).toBeLessThan(2.5);
    expect(total).toBeCloseTo(
      suites.reduce((sum, time) => sum + time, 0),
      2,
    );
    expect(total).toBeGreaterThanOrEqual(10);
    expect(total).toBeLessThan(10.5);
  });

  it('a promotion that failed before any check: its case is the whole duration', () => {
    const started = Date.now() - 1500;
    const xml = junitXml(promotionSuites('local', 1, [], started, undefined, new Error('database down')));
    const [total] = times(xml, 'testsuites');
    expect(total).toBeGreaterThanOrEqual(1.5);
    expect(total).toBeLessThan(2);
    expect(xml).toContain('promote failed: database down');
  });
});
