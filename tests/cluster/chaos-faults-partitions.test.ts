import { describe, expect, it } from 'vitest';
import type { ChaosReport } from '../../cli/chaos/run.js';
import { runWorkbench } from '../helpers/cli.js';

/**
 * `workbench chaos --kinds` with only the partitions (seed 1: peers to-node, postgres from-node, redis both,
 * redis from-node, peers both): each cut one node's own proxy, held bytes (or dropped its bus publishes),
 * healed, the node healthy again, and every property held.
 */
describe('workbench chaos: partitions of one node', () => {
  it('from Postgres, from Redis, from its peers, one-way and two-way: every property holds', async () => {
    const kinds = 'partition-postgres,partition-redis,partition-peers';
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
    expect(report.kinds).toEqual(kinds.split(','));
    expect(report.faults.map((f) => `${f.kind} ${f.way}`)).toEqual([
      'partition-peers to-node',
      'partition-postgres from-node',
      'partition-redis both',
      'partition-redis from-node',
      'partition-peers both',
    ]);
    for (const fault of report.faults) {
      expect(fault.error, fault.description).toBeUndefined();
      // What the cut held or dropped: a partition through which nothing would have gone tested nothing.
      const [, held, dropped] =
        /^held (\d+) bytes, dropped (\d+) bus publishes$/.exec(fault.note ?? '') ?? [];
      expect(Number(held) + Number(dropped), `${fault.description}: ${fault.note}`).toBeGreaterThan(0);
    }
    expect(report.load!.accepted.dm + report.load!.accepted.broadcast).toBeGreaterThan(100);
  }, 180_000);
});
