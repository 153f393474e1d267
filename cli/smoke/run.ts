/**
 * Runs every smoke check against a cluster and compares each outcome with the phase's expectations:
 * `pass`, `expected-fail` (the check documents a gap of that phase, and must fail; n/a on too small a
 * cluster) or `n/a` (meaningless on the phase's own topology; where it can run, it must not fail). An expected
 * failure that passes is reported too, so the matrix stays honest.
 */
import type { FlagKey } from '../../flags/registry.js';
import type { TestCase } from '../report/junit.js';
import { type Check, rowOf } from './check.js';
import { CHECKS, CheckFailed } from './checks.js';
import { NotApplicable, SkippedByEnvironment, SmokeContext, type SmokeTarget } from './context.js';

export type Outcome = 'pass' | 'fail' | 'n/a' | 'skipped';
export type Expectation = 'pass' | 'expected-fail' | 'n/a';

export interface CheckResult {
  name: string;
  /** The flag of the row it checks (null: a cross-cutting check). */
  flag: FlagKey | null;
  /** That row as the registry names it (or the cross-cutting check's property). */
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

/** A check's budget unless it names its own: a check that has not finished by then fails. */
const CHECK_TIMEOUT_MS = 15_000;

async function runOne(check: Check, target: SmokeTarget): Promise<{ outcome: Outcome; detail: string }> {
  // Said up front, before the check sets anything up.
  if (check.needsControl && !target.control)
    return { outcome: 'skipped', detail: 'the environment does not let checks stop its nodes (no control)' };
  const context = new SmokeContext(target, check.needsControl);
  const timeoutMs = check.timeoutMs ?? CHECK_TIMEOUT_MS;
  let timer: NodeJS.Timeout | undefined;
  let result: { outcome: Outcome; detail: string };
  try {
    const note = await Promise.race([
      check.run(context),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new CheckFailed(`no result within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
    result = { outcome: 'pass', detail: typeof note === 'string' ? note : '' };
  } catch (error) {
    result =
      error instanceof NotApplicable
        ? { outcome: 'n/a', detail: error.message }
        : error instanceof SkippedByEnvironment
          ? { outcome: 'skipped', detail: error.message }
          : { outcome: 'fail', detail: (error as Error).message };
  } finally {
    clearTimeout(timer);
  }
  // A node the check stopped must be back before the next check, or that one would fail for this one.
  try {
    await context.close();
  } catch (error) {
    return { outcome: 'fail', detail: `${result.detail} (and ${(error as Error).message})`.trim() };
  }
  return result;
}

/** Names of every check, in the order they run. */
export const CHECK_NAMES = CHECKS.map((check) => check.name);

/**
 * Every check, in the order they run: its name, the flag of the row it checks (null: cross-cutting), and
 * whether it needs node control (crashes, drains or restarts nodes; `skipped` without it).
 */
export const CHECK_INVENTORY: ReadonlyArray<{ name: string; flag: FlagKey | null; needsControl: boolean }> =
  CHECKS.map(({ name, flag, needsControl }) => ({ name, flag, needsControl }));

/**
 * Runs the checks (all, or the ones named in `only`) in order, each against its expectation; `onResult`
 * hears each result as soon as its check is done (the CLI prints it then, not at the end).
 */
export async function runSmoke(
  target: SmokeTarget,
  expectations: Expectations,
  only?: string[],
  onResult: (result: CheckResult) => void = () => {},
): Promise<CheckResult[]> {
  const results: CheckResult[] = [];
  for (const check of CHECKS.filter((c) => !only || only.includes(c.name))) {
    const started = Date.now();
    const { outcome, detail } = await runOne(check, target);
    const expected = expectations.checks[check.name]?.expect ?? 'pass';
    // A gap cannot show on a cluster too small for its check: n/a meets an expected failure too. A check
    // that is n/a for a phase's own topology (one node in phase 0) must not fail on a bigger cluster.
    // A check the environment opted out of (`skipped`) meets any expectation; it is printed as such.
    const met =
      outcome === 'skipped' ||
      (expected === 'expected-fail'
        ? outcome === 'fail' || outcome === 'n/a'
        : expected === 'n/a'
          ? outcome !== 'fail'
          : outcome === 'pass');
    const result: CheckResult = {
      name: check.name,
      flag: check.flag,
      row: rowOf(check),
      outcome,
      expected,
      met,
      ms: Date.now() - started,
      detail:
        outcome === 'fail' && expected === 'expected-fail'
          ? (expectations.checks[check.name]?.gap ?? detail)
          : detail,
    };
    results.push(result);
    onResult(result);
  }
  return results;
}

/**
 * One line per check: `pass`, `fail`, `expected-fail` or `n/a`, its time, the row it checks (the registry's
 * name of it), and why when it matters.
 */
export function formatResult(result: CheckResult): string {
  const label =
    result.outcome === 'fail' && result.expected === 'expected-fail'
      ? 'expected-fail'
      : result.outcome === 'pass' && result.expected === 'expected-fail'
        ? 'fail (expected to fail: the gap is gone, update the expectations)'
        : result.outcome;
  const mark = result.met ? ' ' : '!';
  const why = result.detail ? `: ${result.detail}` : '';
  return `${mark} ${label.padEnd(13)} ${result.name.padEnd(27)} ${String(result.ms).padStart(6)} ms  ${result.row}${why}`;
}

/**
 * A check's result as a JUnit test case (cli/report/junit.ts): judged by its expectation, as the exit code
 * is. A met expectation passes, an expected failure that fails included (the gap it documents is in its
 * output); `n/a` and `skipped` are skipped; an unmet one fails: a check that failed, or an expected failure
 * that passed ("missed": the gap is gone and the expectations need updating), or one that could not run
 * where it had to pass.
 */
export function junitCase(result: CheckResult, classname: string): TestCase {
  const base = { name: result.name, classname, ms: result.ms };
  const detail = `${result.row}${result.detail ? `: ${result.detail}` : ''}`;
  if (result.met) {
    if (result.outcome === 'n/a' || result.outcome === 'skipped')
      return { ...base, status: 'skipped', message: `${result.outcome}: ${result.detail || result.row}` };
    return {
      ...base,
      status: 'passed',
      detail: result.outcome === 'fail' ? `expected failure (a gap of this phase): ${detail}` : detail,
    };
  }
  // Unmet, an expected failure can only have passed (n/a and skipped meet it).
  if (result.expected === 'expected-fail')
    return {
      ...base,
      status: 'failed',
      type: 'missed-expected-failure',
      message: 'expected to fail (a gap of this phase), but passed: the gap is gone, update the expectations',
      detail,
    };
  return {
    ...base,
    status: 'failed',
    type: result.outcome === 'fail' ? 'check-failed' : `unexpected-${result.outcome}`,
    message:
      result.outcome === 'fail'
        ? result.detail || `${result.name} failed`
        : `${result.outcome} where ${result.expected} was expected${result.detail ? `: ${result.detail}` : ''}`,
    detail,
  };
}
