import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { runWorkbench, WORKBENCH } from '../helpers/cli.js';
import { SMOKE_CLUSTER } from '../helpers/cluster.js';
import { readJunit, readJunitReport } from '../helpers/junit.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let cwd: string;
const flagsPath = () => join(cwd, '.workbench', 'flags', 'local.json');
const env = { WORKBENCH_ACTOR: 'release-manager' };

beforeAll(async () => {
  db = await createTestDatabase('promote');
  cwd = mkdtempSync(join(tmpdir(), 'wb-promote-'));
  // Three nodes (phase 3 topology) starting on phase 0's flags, in environment "local".
  const up = await runWorkbench(
    ['up', '--phase', '3', '--flags-phase', '0', '--env', 'local', '--port', '0', '--database-url', db.url],
    SMOKE_CLUSTER,
    cwd,
  );
  expect(up.code, up.stderr).toBe(0);
}, 60_000);
afterAll(async () => {
  await runWorkbench(['down'], {}, cwd);
  rmSync(cwd, { recursive: true, force: true });
  await db?.drop();
});

/** `workbench ARGS` with the time each stdout line arrived (ms after the start): is it streamed? */
function runTimed(args: string[], cwdOf: string) {
  return new Promise<{ code: number | null; lines: Array<{ at: number; text: string }>; stderr: string }>(
    (resolve, reject) => {
      const started = Date.now();
      const child = spawn(process.execPath, [WORKBENCH, ...args], {
        cwd: cwdOf,
        env: { ...process.env, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const lines: Array<{ at: number; text: string }> = [];
      let partial = '';
      let stderr = '';
      child.stdout.on('data', (chunk) => {
        const parts = (partial + chunk).split('\n');
        partial = parts.pop()!;
        for (const text of parts) lines.push({ at: Date.now() - started, text });
      });
      child.stderr.on('data', (chunk) => {
        stderr += chunk;
      });
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, lines, stderr }));
    },
  );
}

const promotions = async () =>
  (await db.query('SELECT from_phase, to_phase, status, failed_check FROM promotions ORDER BY id')).rows;

describe('workbench promote and rollback', () => {
  it('refuses a promotion whose policy is not met, changing nothing', async () => {
    const before = readFileSync(flagsPath(), 'utf8');
    const result = await runWorkbench(
      ['promote', '--env', 'local', '--to', '1', '--require-passed-in', 'staging'],
      env,
      cwd,
    );
    expect(result.code).toBe(3);
    expect(result.stdout).toContain(
      'blocked, nothing changed: policy: phase 1 has not passed in staging yet',
    );
    expect(readFileSync(flagsPath(), 'utf8')).toBe(before);
  });

  it('promotes 0 → 1; a promotion to 2 whose checks fail after the flip is rolled back, naming the check', async () => {
    // As a CI job runs it: JSON lines, each as it happens, and a JUnit report.
    const report = join(cwd, 'promote-1.xml');
    const first = await runTimed(
      ['promote', '--env', 'local', '--to', '1', '--json', '--junit', report],
      cwd,
    );
    expect(first.code, first.lines.map((l) => l.text).join('\n') + first.stderr).toBe(0);
    const events = first.lines.map((line) => ({ ...JSON.parse(line.text), at: line.at }));
    const checks = events.filter((event) => event.type === 'check');
    const checksBefore = checks.filter((event) => event.when === 'before' && event.phase === 0);
    const checksAfter = checks.filter((event) => event.when === 'after' && event.phase === 1);
    expect(checksBefore.length).toBeGreaterThan(10);
    expect(checksAfter.length).toBe(checksBefore.length);
    expect(events.filter((event) => event.type === 'step').length).toBeGreaterThanOrEqual(3);
    const outcome = events.at(-1);
    expect(outcome).toMatchObject({
      type: 'outcome',
      status: 'promoted',
      environment: 'local',
      from: 0,
      to: 1,
      exitCode: 0,
    });
    // Streamed: the first check's line came while the others still ran (half their time before the end).
    const rest = checks.slice(1).reduce((sum, event) => sum + event.ms, 0);
    expect(rest).toBeGreaterThan(2000); // the node-failure checks take seconds
    expect(checks[0].at + rest / 2).toBeLessThan(outcome.at);
    // The JUnit report says the same, suite by suite; an expected failure that failed is a pass.
    const { time, suites } = await readJunitReport(report);
    // Each span counted once: the suites add up to <testsuites>'s time, no more than the run took.
    expect(time).toBeCloseTo(
      suites.reduce((sum, suite) => sum + suite.time, 0),
      1,
    );
    expect(time).toBeLessThanOrEqual(outcome.elapsedMs / 1000 + 0.01);
    expect(suites.map((suite) => suite.name)).toEqual([
      'promote local: phase 0 before the flip',
      'promote local: phase 1 after the flip',
      'promote local to phase 1',
    ]);
    for (const [suite, run] of [
      [suites[0]!, checksBefore],
      [suites[1]!, checksAfter],
    ] as const) {
      expect(suite.cases.map((test) => test.name)).toEqual(run.map((event) => event.name));
      expect(suite.failures).toBe(0);
      expect(suite.tests).toBe(run.length);
      expect(suite.skipped).toBe(
        run.filter((event) => event.outcome === 'n/a' || event.outcome === 'skipped').length,
      );
      for (const [i, event] of run.entries()) {
        expect(suite.cases[i]!.time).toBeCloseTo(event.ms / 1000, 2);
        if (event.outcome === 'fail') expect(suite.cases[i]!.systemOut).toContain('expected failure');
      }
    }
    expect(suites[2]!.cases).toMatchObject([{ name: 'promotion', classname: 'promote.local' }]);
    expect(suites[2]!.failures).toBe(0);
    const before = JSON.parse(readFileSync(flagsPath(), 'utf8')).flags;
    expect(before['ha.delivery']).toBe(false);
    // Expectations phase 2 cannot meet after the flip: the DM check is declared to fail there.
    const strict = join(cwd, 'strict.json');
    writeFileSync(
      strict,
      JSON.stringify({ checks: { 'cross-node-dm': { expect: 'expected-fail', gap: 'none' } } }),
    );
    const rolledBackReport = join(cwd, 'promote-2.xml');
    const result = await runWorkbench(
      ['promote', '--env', 'local', '--to', '2', '--expectations', strict, '--junit', rolledBackReport],
      env,
      cwd,
    );
    expect(result.code).toBe(1);
    expect(result.stdout, result.stdout).toContain('rolled back to the previous flags');
    expect(result.stdout).toContain('(check cross-node-dm)');
    // Text: each step with its elapsed time, each check as a line.
    expect(result.stdout).toMatch(/^\[ *\d+\.\d s\] checking phase 1 before the flip$/m);
    expect(result.stdout).toMatch(/^\[ *\d+\.\d s\] ! fail \(expected to fail.*cross-node-dm/m);
    // The missed expected failure fails in JUnit, saying what to do; so does the promotion.
    const [, afterFlip, promotion] = await readJunit(rolledBackReport);
    const missed = afterFlip!.cases.find((test) => test.name === 'cross-node-dm')!;
    expect(missed.failure).toMatchObject({ type: 'missed-expected-failure' });
    expect(missed.failure!.message).toContain('the gap is gone, update the expectations');
    expect(promotion!.cases[0]!.failure!.message).toContain('rolled back to the previous flags');
    expect(promotion!.cases[0]!.failure!.message).toContain('(check cross-node-dm)');
    expect(JSON.parse(readFileSync(flagsPath(), 'utf8')).flags).toEqual(before);
    expect((await promotions()).at(-1)).toMatchObject({
      from_phase: 1,
      to_phase: 2,
      status: 'rolled-back',
      failed_check: 'cross-node-dm',
    });
  }, 400_000);

  // One promotion per test, each with its own time budget: a promotion runs its 19 checks twice, and its
  // node-failure checks wait on leases and restarts, so under a full suite's load one took over 200 s. Each
  // run's lines go to test-results/ as they come, so a timeout still shows which check it was in.
  for (const to of [2, 3]) {
    it(`then promotes ${to - 1} → ${to} after its checks pass`, async () => {
      const log = join(packageRoot(), 'test-results', 'promote', `promote-to-${to}.log`);
      const result = await runWorkbench(['promote', '--env', 'local', '--to', String(to)], env, cwd, {
        logFile: log,
        timeoutMs: 390_000, // ended before the test's own timeout: nothing of it outlives the test
      });
      expect(result.code, result.stdout + result.stderr).toBe(0);
      expect(result.stdout).toContain(`promoted local from phase ${to - 1} to phase ${to}`);
    }, 400_000);
  }

  it('each promotion was recorded and audited; rollback goes back one', async () => {
    expect(JSON.parse(readFileSync(flagsPath(), 'utf8')).flags['ha.audit']).toBe(true);
    expect((await promotions()).filter((p) => p.status === 'promoted').map((p) => p.to_phase)).toEqual([
      1, 2, 3,
    ]);
    const events = await db.query(
      "SELECT count(*)::int AS n FROM audit_log WHERE event_type = 'promotion.promoted' AND actor = 'release-manager'",
    );
    expect(events.rows[0]?.n).toBe(3);
    const back = await runWorkbench(['rollback', '--env', 'local'], env, cwd);
    expect(back.code, back.stdout + back.stderr).toBe(0);
    expect(back.stdout).toContain('rolled local back to phase 2');
    expect(JSON.parse(readFileSync(flagsPath(), 'utf8')).flags['ha.audit']).toBe(false);
  }, 120_000);
});
