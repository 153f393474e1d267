import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runWorkbench } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
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
    expect(result.code).toBe(1);
    expect(result.stdout).toContain(
      'blocked, nothing changed: policy: phase 1 has not passed in staging yet',
    );
    expect(readFileSync(flagsPath(), 'utf8')).toBe(before);
  });

  it('promotes 0 → 1; a promotion to 2 whose checks fail after the flip is rolled back, naming the check', async () => {
    const first = await runWorkbench(['promote', '--env', 'local', '--to', '1'], env, cwd);
    expect(first.code, first.stdout + first.stderr).toBe(0);
    expect(first.stdout).toContain('promoted local from phase 0 to phase 1');
    const before = JSON.parse(readFileSync(flagsPath(), 'utf8')).flags;
    expect(before['ha.delivery']).toBe(false);
    // Expectations phase 2 cannot meet after the flip: the DM check is declared to fail there.
    const strict = join(cwd, 'strict.json');
    writeFileSync(
      strict,
      JSON.stringify({ checks: { 'cross-node-dm': { expect: 'expected-fail', gap: 'none' } } }),
    );
    const result = await runWorkbench(
      ['promote', '--env', 'local', '--to', '2', '--expectations', strict],
      env,
      cwd,
    );
    expect(result.code).toBe(1);
    expect(result.stdout, result.stdout).toContain('rolled back to the previous flags');
    expect(result.stdout).toContain('(check cross-node-dm)');
    expect(JSON.parse(readFileSync(flagsPath(), 'utf8')).flags).toEqual(before);
    expect((await promotions()).at(-1)).toMatchObject({
      from_phase: 1,
      to_phase: 2,
      status: 'rolled-back',
      failed_check: 'cross-node-dm',
    });
  }, 400_000);

  it('then promotes 1 → 2 → 3, each after its checks pass, recorded and audited; rollback goes back one', async () => {
    for (const to of [2, 3]) {
      const result = await runWorkbench(['promote', '--env', 'local', '--to', String(to)], env, cwd);
      expect(result.code, result.stdout + result.stderr).toBe(0);
      expect(result.stdout).toContain(`promoted local from phase ${to - 1} to phase ${to}`);
    }
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
  }, 400_000);
});
