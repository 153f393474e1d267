import { describe, expect, it } from 'vitest';
import { FAULT_KINDS } from '../../cli/chaos/faults.js';
import type { ChaosReport } from '../../cli/chaos/run.js';
import { WORKLOAD_KINDS } from '../../cli/chaos/workload-report.js';
import { runWorkbench } from '../helpers/cli.js';

describe('workbench chaos', () => {
  it('a short seeded run: every fault kind happens and recovers; every property holds', async () => {
    // 95 s: the shortest run that spaces out thirteen faults, one of each kind (tests/unit/chaos-faults.test.ts
    // pins this schedule).
    const result = await runWorkbench(['chaos', '--seed', '7', '--duration', '95s', '--json']);
    const report = JSON.parse(result.stdout) as ChaosReport;
    // Sender order now holds by construction (docs/delivery.md), silent bus loss included: no property may
    // fail, and the command says so with exit 0.
    const failed = report.properties.filter((p) => !p.ok);
    expect(failed, `${result.stderr}\n${JSON.stringify(failed, null, 2)}\n${report.error ?? ''}`).toEqual([]);
    expect(report.error).toBeUndefined();
    expect(result.code).toBe(0);
    expect(report.ok).toBe(true);
    const happened = report.faults.filter(
      (f) => f.startedAtMs !== undefined && f.endedAtMs !== undefined && !f.error,
    );
    expect(new Set(happened.map((f) => f.kind))).toEqual(new Set(FAULT_KINDS));
    // The workload (issue 26 item 6): every kind accepted something; capacity, target and rates reported,
    // the target a quarter of the measured capacity (or its floor on a machine too loaded to pass a step).
    const workload = report.workload!;
    for (const kind of WORKLOAD_KINDS) expect(workload.accepted[kind], kind).toBeGreaterThan(0);
    expect(workload.capacity.steps.length).toBeGreaterThan(0);
    expect(workload.target.durablePerSecond).toBeGreaterThanOrEqual(
      Math.min(150, Math.max(7.5, workload.capacity.dmPerSecond * 0.25)),
    );
    expect(workload.entries).toHaveLength(4);
    expect(report.load!.accepted.group).toBeGreaterThan(0);
    expect(report.properties.map((p) => p.name)).toEqual([
      'workload',
      'no-loss',
      'no-duplicates',
      'sender-order',
      'audit-chains',
      'schedules-once',
      'clock-increasing',
      'lease-epochs',
      'faults-recovered',
      'history',
    ]);
  }, 240_000);

  it('refuses bad input with exit 2 before starting anything', async () => {
    for (const args of [
      [],
      ['--seed', 'x'],
      ['--seed', '1', '--duration', '5s'],
      ['--seed', '1', '--faults', '99'],
      ['--seed', '1', '--kinds', 'node-kill,partition-everything'],
      ['--seed', '1', '--kinds', 'node-kill,node-kill'],
    ]) {
      const result = await runWorkbench(['chaos', ...args]);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toMatch(/workbench chaos: --(seed|duration|faults|kinds)/);
    }
  });
});
