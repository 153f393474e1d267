import { describe, expect, it } from 'vitest';
import { FAULT_KINDS } from '../../cli/chaos/faults.js';
import type { ChaosReport } from '../../cli/chaos/run.js';
import { runWorkbench } from '../helpers/cli.js';

describe('workbench chaos', () => {
  it('a short seeded run: every fault kind happens and recovers; every property holds but the known sender-order gap', async () => {
    const result = await runWorkbench(['chaos', '--seed', '7', '--duration', '60s', '--json']);
    const report = JSON.parse(result.stdout) as ChaosReport;
    // Known gap (docs/chaos.md, docs/delivery.md): a DM whose live wake-up is lost in a fault and that only
    // the sweep delivers can arrive after a later DM of the same sender. The command still fails on it
    // (exit 1, sender-order FAIL); this test holds every other property to zero and lets only that one
    // known failure through, so a new kind of failure still fails CI.
    const failed = report.properties.filter((p) => !p.ok);
    const unexpected = failed.filter((p) => p.name !== 'sender-order');
    expect(unexpected, `${result.stderr}\n${JSON.stringify(failed, null, 2)}\n${report.error ?? ''}`).toEqual(
      [],
    );
    expect(report.error).toBeUndefined();
    expect(result.code).toBe(failed.length === 0 ? 0 : 1);
    expect(report.ok).toBe(failed.length === 0);
    const happened = report.faults.filter(
      (f) => f.startedAtMs !== undefined && f.endedAtMs !== undefined && !f.error,
    );
    expect(new Set(happened.map((f) => f.kind))).toEqual(new Set(FAULT_KINDS));
    expect(report.properties.map((p) => p.name)).toEqual([
      'no-loss',
      'no-duplicates',
      'sender-order',
      'audit-chains',
      'schedules-once',
      'clock-increasing',
      'faults-recovered',
    ]);
  }, 180_000);

  it('refuses bad input with exit 2 before starting anything', async () => {
    for (const args of [
      [],
      ['--seed', 'x'],
      ['--seed', '1', '--duration', '5s'],
      ['--seed', '1', '--faults', '99'],
    ]) {
      const result = await runWorkbench(['chaos', ...args]);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toMatch(/workbench chaos: --(seed|duration|faults)/);
    }
  });
});
