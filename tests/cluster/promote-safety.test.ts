/**
 * `workbench promote`'s safety on a real local cluster (issue 27 item 1), each refusal before any change
 * and in seconds, not after a smoke run: a missing expectations file (exit 2), a held promotion lock (exit
 * 3, naming its holder), a skipped phase (exit 3); and `--dry-run`'s plan, which changes nothing. No smoke
 * check runs in this file: each case stops before the first.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCK_KEY_SQL } from '../../cli/promotion/lock.js';
import { FLAG_KEYS, phasePreset } from '../../flags/registry.js';
import { runWorkbench } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let cwd: string;
const flagsPath = () => join(cwd, '.workbench', 'flags', 'local.json');
const env = { WORKBENCH_ACTOR: 'release-manager' };

beforeAll(async () => {
  db = await createTestDatabase('promote_safety');
  cwd = mkdtempSync(join(tmpdir(), 'wb-promote-safety-'));
  // Phase 1: two nodes on phase 1's flags, environment "local".
  const up = await runWorkbench(
    ['up', '--phase', '1', '--env', 'local', '--port', '0', '--database-url', db.url],
    FAST_CLUSTER,
    cwd,
  );
  expect(up.code, up.stderr).toBe(0);
}, 60_000);
afterAll(async () => {
  await runWorkbench(['down'], {}, cwd);
  rmSync(cwd, { recursive: true, force: true });
  await db?.drop();
});

/** Nothing changed: the flags as `up` wrote them, no smoke run stored. */
async function expectNothingChanged(flagsBefore: string) {
  expect(readFileSync(flagsPath(), 'utf8')).toBe(flagsBefore);
  expect((await db.query('SELECT count(*)::int AS n FROM smoke_runs')).rows[0]?.n).toBe(0);
}

async function promote(args: string[]) {
  const started = Date.now();
  const result = await runWorkbench(['promote', '--env', 'local', ...args], env, cwd);
  return { ...result, ms: Date.now() - started };
}

describe('promote refuses before any change', () => {
  it('a missing expectations file: exit 2 naming it, in seconds, nothing read after it', async () => {
    const before = readFileSync(flagsPath(), 'utf8');
    const missing = join(cwd, 'no-such-expectations.json');
    const result = await promote(['--to', '2', '--expectations', missing, '--json']);
    expect(result.code, result.stdout + result.stderr).toBe(2);
    expect(JSON.parse(result.stdout.trim())).toEqual({
      error: `--expectations: cannot read ${missing} (no such file)`,
      exitCode: 2,
    });
    // The old promote found out after 62 s of smoke and a flip; this is the CLI's start and one read.
    expect(result.ms).toBeLessThan(5000);
    await expectNothingChanged(before);
    expect((await db.query('SELECT count(*)::int AS n FROM promotions')).rows[0]?.n).toBe(0);
  });

  it('a bad analysis file, or --analysis without a Prometheus: exit 2 naming the field, nothing changed', async () => {
    const before = readFileSync(flagsPath(), 'utf8');
    const bad = join(cwd, 'bad-analysis.yaml');
    writeFileSync(
      bad,
      'metrics:\n  - name: latency\n    successCondition: result <\n    provider: {prometheus: {query: up}}\n',
    );
    const result = await promote(['--to', '2', '--analysis', bad, '--prometheus', 'http://127.0.0.1:9']);
    expect(result.code, result.stdout + result.stderr).toBe(2);
    expect(result.stderr).toContain(
      `--analysis: ${bad}: metrics.0.successCondition: the condition ends too early`,
    );
    // The local cluster has no Prometheus of its own: --analysis needs --prometheus.
    const none = await promote(['--to', '2', '--analysis', 'default']);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('--analysis needs a Prometheus: give --prometheus URL');
    // A dry run plans the phases' own analyses (baseline: phase 1's, bake: phase 2's) and asks nothing.
    const plan = await promote([
      '--to',
      '2',
      '--analysis',
      'default',
      '--prometheus',
      'http://127.0.0.1:9',
      '--dry-run',
    ]);
    expect(plan.code, plan.stdout + plan.stderr).toBe(0);
    expect(plan.stdout).toMatch(
      /analysis: against http:\/\/127\.0\.0\.1:9; baseline before the flip .*phase1\/analysis\.yaml: bus-publish-failures/,
    );
    expect(plan.stdout).toMatch(
      /bake after it .*phase2\/analysis\.yaml: delivery-latency-p99 \(4 × 30 s, about 90 s\)/,
    );
    await expectNothingChanged(before);
    expect((await db.query('SELECT count(*)::int AS n FROM promotions')).rows[0]?.n).toBe(0);
  });

  it('--dry-run prints the plan (flag changes per node, checks, analysis) and changes nothing', async () => {
    const before = readFileSync(flagsPath(), 'utf8');
    const text = await promote(['--to', '2', '--dry-run']);
    expect(text.code, text.stdout + text.stderr).toBe(0);
    const changed = FLAG_KEYS.filter((flag) => phasePreset(1)[flag] !== phasePreset(2)[flag]);
    expect(changed.length).toBeGreaterThan(0);
    expect(text.stdout).toContain('dry run: promote local from phase 1 to phase 2; nothing changed');
    for (const node of ['broker-1', 'broker-2'])
      expect(text.stdout).toContain(`  ${node}: ${changed.map((f) => `${f} false → true`).join(', ')}`);
    expect(text.stdout).toMatch(/checks before the flip \(phase 1\):\n {2}cross-node-dm expected-fail/);
    expect(text.stdout).toMatch(/checks after the flip \(phase 2\):\n {2}cross-node-dm pass/);
    expect(text.stdout).toContain('analysis: none');
    const json = await promote(['--to', '2', '--dry-run', '--json']);
    expect(json.code).toBe(0);
    const outcome = JSON.parse(json.stdout.trim().split('\n').at(-1)!);
    expect(outcome).toMatchObject({ type: 'outcome', status: 'planned', from: 1, to: 2, exitCode: 0 });
    expect(outcome.plan.flagChanges.map((n: { node: string }) => n.node)).toEqual(['broker-1', 'broker-2']);
    expect(outcome.plan.flagChanges[0].changes).toEqual(
      changed.map((flag) => ({ flag, now: false, to: true })),
    );
    await expectNothingChanged(before);
    expect((await db.query('SELECT count(*)::int AS n FROM promotions')).rows[0]?.n).toBe(0);
  });

  it('a second promotion (or a rollback) while the lock is held: exit 3 naming the holder', async () => {
    const before = readFileSync(flagsPath(), 'utf8');
    // The holder: a promotion elsewhere, as lock.ts takes the lock.
    const holder = new pg.Client({
      connectionString: db.url,
      application_name: 'workbench-promote tester@ci:4242',
    });
    await holder.connect();
    try {
      await holder.query(`SELECT pg_advisory_lock(${LOCK_KEY_SQL})`, ['local']);
      const result = await promote(['--to', '2']);
      expect(result.code, result.stdout + result.stderr).toBe(3);
      expect(result.stdout).toMatch(
        /blocked, nothing changed: another promotion of local holds the lock: workbench-promote tester@ci:4242 \(since /,
      );
      expect(result.stdout).not.toContain('checking phase');
      // A rollback waits its turn too.
      const back = await runWorkbench(['rollback', '--env', 'local'], env, cwd);
      expect(back.code).toBe(1);
      expect(back.stderr).toContain(
        'another promotion of local holds the lock: workbench-promote tester@ci:4242',
      );
      await expectNothingChanged(before);
    } finally {
      await holder.end();
    }
  });

  it('skipping a phase: exit 3 without --allow-skip; with it, a dry run plans it and a run audits it', async () => {
    const before = readFileSync(flagsPath(), 'utf8');
    const result = await promote(['--to', '3']);
    expect(result.code, result.stdout + result.stderr).toBe(3);
    expect(result.stdout).toContain(
      'blocked, nothing changed: phase 1 to 3 skips a phase: promote one phase at a time, or give --allow-skip (audited)',
    );
    const allowed = await promote(['--to', '3', '--allow-skip', '--dry-run']);
    expect(allowed.code, allowed.stdout + allowed.stderr).toBe(0);
    expect(allowed.stdout).toContain('--allow-skip: going from phase 1 straight to phase 3');
    expect(allowed.stdout).toContain('dry run: promote local from phase 1 to phase 3');
    // A skip allowed is audited: here the policy then blocks it, and its audit event says --allow-skip.
    const audited = await promote(['--to', '3', '--allow-skip', '--require-passed-in', 'staging']);
    expect(audited.code, audited.stdout + audited.stderr).toBe(3);
    expect(audited.stdout).toContain('policy: phase 3 has not passed in staging yet');
    const events = await db.query(
      "SELECT payload FROM audit_log WHERE event_type = 'promotion.blocked' AND actor = 'release-manager' ORDER BY id",
    );
    expect(events.rows.map((row) => row.payload.allowSkip)).toEqual([undefined, true]);
    await expectNothingChanged(before);
    const recorded = await db.query('SELECT to_phase, status FROM promotions ORDER BY id');
    // The refusals are recorded; a dry run's is not, nor the lock's (only its holder writes promotions).
    expect(recorded.rows).toEqual([
      { to_phase: 3, status: 'blocked' },
      { to_phase: 3, status: 'blocked' },
    ]);
  });
});

describe('up and smoke check their options before anything starts', () => {
  it('smoke with a malformed expectations file: exit 2 naming the field, no check run', async () => {
    const bad = join(cwd, 'bad-expectations.json');
    writeFileSync(bad, JSON.stringify({ checks: { 'cross-node-dm': { expect: 'passes' } } }));
    const result = await runWorkbench(['smoke', '--phase', '1', '--expectations', bad], env, cwd);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`--expectations: ${bad}: checks.cross-node-dm.expect: `);
    expect((await db.query('SELECT count(*)::int AS n FROM smoke_runs')).rows[0]?.n).toBe(0);
  });

  it.each([
    [['--flags-phase', '9'], '--flags-phase must be 0, 1, 2, 3 or 4, not "9"'],
    [['--env', 'no/such'], '--env must be an environment name'],
  ])('up %j: exit 2 naming it, no cluster', async (args, message) => {
    const elsewhere = mkdtempSync(join(tmpdir(), 'wb-up-bad-'));
    try {
      const result = await runWorkbench(
        ['up', '--phase', '1', ...args, '--port', '0'],
        FAST_CLUSTER,
        elsewhere,
      );
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(message);
      expect(existsSync(join(elsewhere, '.workbench', 'cluster.json'))).toBe(false);
    } finally {
      await runWorkbench(['down'], {}, elsewhere);
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });
});
