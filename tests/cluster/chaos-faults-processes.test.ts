import { describe, expect, it } from 'vitest';
import type { ChaosReport } from '../../cli/chaos/run.js';
import { runWorkbench } from '../helpers/cli.js';

/**
 * `workbench chaos --kinds` with the process faults (seed 1: postgres-crash, leader-pause of the lease
 * holder, clock-skew of broker-3, postgres-crash, leader-pause of the clock leader): a leader stopped
 * longer than its lease, a node restarted under libfaketime (its Date header checked off by the skew),
 * the durable Postgres SIGKILLed twice; every `sent` message delivered, ticks strictly increasing, every
 * schedule fired once.
 */
describe('workbench chaos: leader pause, clock skew, Postgres crash', () => {
  it('every property holds, no-loss across two crashes of a durable Postgres included', async () => {
    const kinds = 'leader-pause,clock-skew,postgres-crash';
    const result = await runWorkbench([
      'chaos',
      '--seed',
      '1',
      '--duration',
      '45s',
      '--faults',
      '5',
      '--kinds',
      kinds,
      '--json',
    ]);
    const report = JSON.parse(result.stdout) as ChaosReport;
    const failed = report.properties.filter((p) => !p.ok);
    expect(failed, `${result.stderr}\n${JSON.stringify(failed, null, 2)}\n${report.error ?? ''}`).toEqual([]);
    expect(result.code).toBe(0);
    expect(report.faults.map((f) => `${f.kind} ${f.target ?? ''}`.trim())).toEqual([
      'postgres-crash',
      'leader-pause lease-holder',
      'clock-skew broker-3',
      'postgres-crash',
      'leader-pause clock-leader',
    ]);
    for (const fault of report.faults) expect(fault.error, fault.description).toBeUndefined();
    for (const pause of report.faults.filter((f) => f.kind === 'leader-pause'))
      expect(pause.note).toMatch(/^paused broker-[123]$/);
    expect(report.properties.find((p) => p.name === 'no-loss')!.summary).toMatch(/, 0 lost/);
    expect(report.load!.accepted.dm + report.load!.accepted.broadcast).toBeGreaterThan(100);
  }, 180_000);
});
