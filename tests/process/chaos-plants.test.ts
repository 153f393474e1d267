/**
 * Planted bugs prove the checker (docs/chaos.md § Planted bugs), as the nightly matrix runs them: `workbench
 * chaos --list-plants` names them one per line; an unknown `--plant` is exit 2 before anything starts; and
 * two real 30 s runs, each with one plant, exit 1 with the report's plant verdict naming the plant's own
 * anomaly (the same seeds without the plant hold: tests/cluster/chaos.test.ts and chaos-check.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { CHAOS_PLANT_NAMES } from '../../broker/plants.js';
import type { ChaosReport } from '../../cli/chaos/run.js';
import { runWorkbench } from '../helpers/cli.js';

describe('workbench chaos --plant', () => {
  it('--list-plants prints the names one per line; an unknown plant is exit 2, nothing started', async () => {
    const list = await runWorkbench(['chaos', '--list-plants']);
    expect(list.code).toBe(0);
    expect(list.stdout.trim().split('\n')).toEqual([...CHAOS_PLANT_NAMES]);
    const unknown = await runWorkbench(['chaos', '--plant', 'no-such', '--seed', '1']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown plant "no-such"');
    // Refused before anything starts: no throw-away services or cluster were announced.
    expect(unknown.stdout).not.toContain('throw-away postgres');
  });

  it.each([
    ['clock-unfenced', ['clock-nonincreasing', 'clock-increasing']],
    // Its own fault kinds: two of postgres-restart, postgres-crash and node-kill (a shuffle), so at least one
    // of the database's, which loses every message answered during it.
    ['ack-before-commit', ['lost-write', 'no-loss']],
  ])(
    '%s: a 30 s run exits 1 naming its anomaly',
    async (plant, anomalies) => {
      const run = await runWorkbench(
        ['chaos', '--plant', plant, '--seed', '3', '--duration', '30s', '--faults', '2', '--json'],
        {},
        undefined,
        { timeoutMs: 150_000 },
      );
      const report = JSON.parse(run.stdout) as ChaosReport;
      expect(report.error, run.stderr).toBeUndefined();
      expect(run.code).toBe(1);
      expect(report.plant, JSON.stringify(report.properties)).toMatchObject({ name: plant, caught: true });
      expect(anomalies).toContain(report.plant!.anomaly);
    },
    180_000,
  );
});
