/**
 * `workbench promote`'s inputs and exit codes (issue 27 item 1): a bad input is a UsageError (exit 2)
 * naming its field, read before anything else; each outcome has its own exit code, in the text, in --json's
 * outcome and in the JUnit report; a rollback that fails is rollback-failed, exit 4.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Pool } from '../../broker/db/pool.js';
import { UsageError } from '../../cli/args.js';
import { promotionSuites } from '../../cli/commands/promote.js';
import type { Environment } from '../../cli/environments/environment.js';
import { exitCodeOf, outcomeLine, PROMOTE_EXIT_CODES } from '../../cli/promotion/exit-codes.js';
import {
  environmentNameOption,
  phaseExpectations,
  phaseOption,
  readExpectations,
  targetExpectations,
} from '../../cli/promotion/inputs.js';
import { putBack } from '../../cli/promotion/promote.js';
import { junitXml } from '../../cli/report/junit.js';
import { phasePreset } from '../../flags/registry.js';

const dir = mkdtempSync(join(tmpdir(), 'wb-promote-inputs-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};
const usage = (run: () => unknown) => {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(UsageError);
    return (error as Error).message;
  }
  throw new Error('no UsageError');
};

describe('promote inputs', () => {
  it('a missing expectations file is bad input naming --expectations and the path', () => {
    const message = usage(() => targetExpectations(2, join(dir, 'nope.json')));
    expect(message).toBe(`--expectations: cannot read ${join(dir, 'nope.json')} (no such file)`);
  });

  it('a malformed one names what is wrong: not JSON, no checks, a bad expectation, an unknown check', () => {
    expect(usage(() => readExpectations(file('a.json', '{"checks": '), '--expectations'))).toMatch(
      /^--expectations: .*a\.json is not valid JSON/,
    );
    expect(usage(() => readExpectations(file('b.json', '[]'), '--expectations'))).toMatch(
      /b\.json: \(file\): /,
    );
    expect(usage(() => readExpectations(file('c.json', '{"phase": 2}'), '--expectations'))).toMatch(
      /c\.json: checks: /,
    );
    const badExpect = file('d.json', '{"checks": {"cross-node-dm": {"expect": "passes"}}}');
    expect(usage(() => readExpectations(badExpect, '--expectations'))).toMatch(
      /d\.json: checks\.cross-node-dm\.expect: /,
    );
    const unknown = file('e.json', '{"checks": {"cross-node-dn": {"expect": "pass"}}}');
    expect(usage(() => readExpectations(unknown, '--expectations'))).toBe(
      `--expectations: ${unknown}: checks.cross-node-dn: no such smoke check`,
    );
  });

  it("every phase folder's expectations pass the same check; a good file is read as written", () => {
    for (const phase of [0, 1, 2, 3, 4])
      expect(Object.keys(phaseExpectations(phase).checks).length).toBeGreaterThan(10);
    const good = file('f.json', '{"checks": {"cross-node-dm": {"expect": "expected-fail", "gap": "g"}}}');
    expect(targetExpectations(2, good).checks['cross-node-dm']).toEqual({
      expect: 'expected-fail',
      gap: 'g',
    });
  });

  it('the target phase and the environment names are checked, each named', () => {
    expect(phaseOption('--to', '3')).toBe(3);
    for (const bad of [undefined, '5', '', '1.0', ' 1', '-1'])
      expect(usage(() => phaseOption('--to', bad))).toMatch(/^--to must be 0, 1, 2, 3 or 4/);
    expect(usage(() => phaseOption('--flags-phase', '9'))).toBe(
      '--flags-phase must be 0, 1, 2, 3 or 4, not "9"',
    );
    expect(environmentNameOption('--env', 'staging')).toBe('staging');
    expect(environmentNameOption('--require-passed-in', undefined)).toBeUndefined();
    expect(usage(() => environmentNameOption('--require-passed-in', 'stag ing'))).toMatch(
      /^--require-passed-in must be/,
    );
    expect(usage(() => environmentNameOption('--env', '../x'))).toMatch(/^--env must be/);
  });
});

describe('promote exit codes', () => {
  it('one per outcome: 0 promoted or planned, 1 rolled back, 3 blocked, 4 rollback failed, 5 paused', () => {
    expect(PROMOTE_EXIT_CODES).toEqual({
      promoted: 0,
      planned: 0,
      rollback: 0,
      'rolled-back': 1,
      blocked: 3,
      'rollback-failed': 4,
      paused: 5,
    });
  });

  it('a rollback whose flags cannot be put back is rollback-failed: exit 4, in the text and the JUnit report', async () => {
    // The flag provider is down when the previous flags go back (the flip had worked).
    const environment = {
      name: 'prod',
      phase: 1,
      target: { nodes: [] },
      flags: {
        kind: 'file',
        describe: 'down',
        read: () => Promise.reject(new Error('flag provider unreachable')),
        write: () => Promise.reject(new Error('flag provider unreachable')),
      },
    } as unknown as Environment;
    const outcome = await putBack({} as Pool, environment, phasePreset(1), 'rm', 1, {
      failedCheck: 'cross-node-dm',
      reason: 'no DM',
    });
    expect(outcome).toMatchObject({ status: 'rollback-failed', from: 1, failedCheck: 'cross-node-dm' });
    expect(outcome.reason).toBe(
      'no DM; putting the phase 1 flags back failed too: flag provider unreachable',
    );
    expect(exitCodeOf(outcome)).toBe(4);
    expect(outcomeLine('prod', 2, outcome)).toMatch(/^ROLLBACK FAILED, a human must look/);
    const xml = junitXml(promotionSuites('prod', 2, [], Date.now(), outcome, undefined));
    expect(xml).toContain('type="rollback-failed"');
    expect(xml).toContain('(exit 4)');
  });

  it('the JUnit case says the exit code of each way a promotion ends', () => {
    const cases = [
      [{ status: 'promoted', from: 0 }, 'promoted from phase 0 to phase 1 (exit 0)'],
      [{ status: 'blocked', from: 0, reason: 'lock' }, 'blocked, nothing changed: lock (exit 3)'],
      [{ status: 'rolled-back', from: 0, reason: 'x' }, 'rolled back to the previous flags: x (exit 1)'],
    ] as const;
    for (const [outcome, text] of cases)
      expect(junitXml(promotionSuites('e', 1, [], Date.now(), outcome, undefined))).toContain(text);
    expect(junitXml(promotionSuites('e', 1, [], Date.now(), undefined, new UsageError('bad')))).toContain(
      'promote failed: bad (exit 2)',
    );
  });
});
