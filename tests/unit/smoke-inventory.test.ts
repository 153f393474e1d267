import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { rowOf } from '../../cli/smoke/check.js';
import { CHECKS } from '../../cli/smoke/checks.js';
import { SmokeContext, type SmokeTarget } from '../../cli/smoke/context.js';
import { CHECK_INVENTORY, CHECK_NAMES } from '../../cli/smoke/run.js';
import { FLAGS } from '../../flags/registry.js';

describe('the smoke checks', () => {
  it('every flag of the registry has a check that runs without node control', () => {
    for (const flag of FLAGS) {
      const controlFree = CHECK_INVENTORY.filter((check) => check.flag === flag.key && !check.needsControl);
      expect(
        controlFree.map((check) => check.name),
        `${flag.key} has no check without node control`,
      ).not.toEqual([]);
    }
  });

  it('name their row by flag: the row shown is the registry text (null only for cross-cutting checks)', () => {
    expect(new Set(CHECK_NAMES).size).toBe(CHECK_NAMES.length);
    expect(CHECK_INVENTORY.map((check) => check.name)).toEqual(CHECK_NAMES);
    for (const check of CHECKS) {
      if (check.flag === null) {
        expect(check.property.length, check.name).toBeGreaterThan(3);
        expect(FLAGS.map((flag) => flag.row)).not.toContain(check.property);
      } else {
        expect(rowOf(check), check.name).toBe(FLAGS.find((flag) => flag.key === check.flag)!.row);
      }
    }
    expect(
      Object.fromEntries(CHECK_INVENTORY.filter((c) => c.flag === null).map((c) => [c.name, c.needsControl])),
    ).toEqual({ 'flags-converged': false, 'lb-sticky-reconnect': false, 'node-kill-reconnect': true });
    expect(CHECK_INVENTORY.find((check) => check.name === 'watch-outlives-session')).toEqual({
      name: 'watch-outlives-session',
      flag: 'ha.watches',
      needsControl: false,
    });
  });

  it.each([0, 1, 2, 3, 4])('phase %i: its expectations name every check, and only them', (phase) => {
    const file = join(packageRoot(), 'phases', `phase${phase}`, 'expectations.json');
    const expectations = JSON.parse(readFileSync(file, 'utf8')) as { checks: Record<string, unknown> };
    expect(Object.keys(expectations.checks)).toEqual(CHECK_NAMES);
  });

  it('a check that does not declare needsControl cannot stop a node, even where the environment could', async () => {
    const calls: string[] = [];
    const target: SmokeTarget = {
      lbUrl: 'http://127.0.0.1:1',
      nodes: [{ id: 'n1', url: 'http://127.0.0.1:1' }],
      databaseUrl: 'postgres://127.0.0.1:1/none',
      adminToken: 'x'.repeat(16),
      flagsEnv: 'local',
      control: {
        kill: async (node) => void calls.push(`kill ${node}`),
        stop: async (node) => void calls.push(`stop ${node}`),
        start: async (node) => void calls.push(`start ${node}`),
      },
    };
    const free = new SmokeContext(target);
    await expect(free.kill('n1')).rejects.toThrow('does not declare needsControl');
    await expect(free.stop('n1')).rejects.toThrow('does not declare needsControl');
    await free.close();
    expect(calls).toEqual([]);
    const controlled = new SmokeContext(target, true);
    await controlled.kill('n1');
    await controlled.start('n1'); // started again by the check: not once more at the end
    await controlled.stop('n1');
    await controlled.close();
    expect(calls).toEqual(['kill n1', 'start n1', 'stop n1', 'start n1']);
  });
});
