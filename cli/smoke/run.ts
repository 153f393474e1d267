/**
 * Runs every smoke check against a cluster and compares each outcome with the phase's expectations:
 * `pass`, `expected-fail` (the check documents a gap of that phase, and must fail) or `n/a`. An expected
 * failure that passes is reported too, so the matrix stays honest.
 */
import { CHECKS, CheckFailed, NotApplicable } from './checks.js';
import { SmokeContext, type SmokeTarget } from './context.js';

export type Outcome = 'pass' | 'fail' | 'n/a';
export type Expectation = 'pass' | 'expected-fail' | 'n/a';

export interface CheckResult {
  name: string;
  row: string;
  outcome: Outcome;
  expected: Expectation;
  met: boolean;
  ms: number;
  detail: string;
}

export interface Expectations {
  checks: Record<string, { expect: Expectation; gap?: string }>;
}

/** One check's budget: a check that has not finished by then fails. */
const CHECK_TIMEOUT_MS = 15_000;

async function runOne(
  check: (typeof CHECKS)[number],
  target: SmokeTarget,
): Promise<{ outcome: Outcome; detail: string }> {
  const context = new SmokeContext(target);
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      check.run(context),
      new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new CheckFailed(`no result within ${CHECK_TIMEOUT_MS} ms`)),
          CHECK_TIMEOUT_MS,
        );
      }),
    ]);
    return { outcome: 'pass', detail: '' };
  } catch (error) {
    if (error instanceof NotApplicable) return { outcome: 'n/a', detail: error.message };
    return { outcome: 'fail', detail: (error as Error).message };
  } finally {
    clearTimeout(timer);
    context.close();
  }
}

export async function runSmoke(target: SmokeTarget, expectations: Expectations): Promise<CheckResult[]> {
  const results: CheckResult[] = [];
  for (const check of CHECKS) {
    const started = Date.now();
    const { outcome, detail } = await runOne(check, target);
    const expected = expectations.checks[check.name]?.expect ?? 'pass';
    // A gap cannot show on a cluster too small for its check: n/a meets an expected failure too.
    const met = expected === 'expected-fail' ? outcome === 'fail' || outcome === 'n/a' : outcome === expected;
    results.push({
      name: check.name,
      row: check.row,
      outcome,
      expected,
      met,
      ms: Date.now() - started,
      detail:
        outcome === 'fail' && expected === 'expected-fail'
          ? (expectations.checks[check.name]?.gap ?? detail)
          : detail,
    });
  }
  return results;
}

/** One line per check: `pass`, `fail`, `expected-fail` or `n/a`, its time, and why when it matters. */
export function formatResult(result: CheckResult): string {
  const label =
    result.outcome === 'fail' && result.expected === 'expected-fail'
      ? 'expected-fail'
      : result.outcome === 'pass' && result.expected === 'expected-fail'
        ? 'fail (expected to fail: the gap is gone, update the expectations)'
        : result.outcome;
  const mark = result.met ? ' ' : '!';
  return `${mark} ${label.padEnd(13)} ${result.name.padEnd(24)} ${String(result.ms).padStart(6)} ms  ${result.detail}`.trimEnd();
}
