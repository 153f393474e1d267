import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BrokerMetrics } from '../../broker/metrics.js';
import { STATE_ROWS } from '../../broker/modules.js';
import { CHECK_INVENTORY } from '../../cli/smoke/run.js';
import { FLAGS } from '../../flags/registry.js';

/**
 * One row of the state inventory = one module = one flag = one metric family = one smoke check = one doc
 * (docs/design.md §2). Adding a flag without the rest fails here.
 */
const ROOT = join(import.meta.dirname, '..', '..');
const inventory = readFileSync(join(ROOT, 'docs/state-inventory.md'), 'utf8');

describe('the state inventory', () => {
  it('has exactly one row per flag of the registry, and no row without a flag', () => {
    expect(STATE_ROWS.map((row) => row.flag).sort()).toEqual(FLAGS.map((flag) => flag.key).sort());
  });

  it('gives every row a metric family of its own, registered on every node', () => {
    const metrics = new BrokerMetrics('inventory');
    for (const row of STATE_ROWS) {
      expect(metrics.registry.getSingleMetric(row.metric), `${row.flag}: ${row.metric}`).toBeDefined();
    }
    const families = STATE_ROWS.map((row) => row.metric);
    expect(new Set(families).size).toBe(families.length);
  });

  it('gives every row a folder with its definition, a doc that exists, and a section in docs/state-inventory.md', () => {
    for (const row of STATE_ROWS) {
      expect(existsSync(join(ROOT, row.doc)), `${row.flag}: ${row.doc}`).toBe(true);
      const heading = inventory
        .split('\n')
        .find((line) => line.startsWith('### ') && line.includes(`\`${row.flag}\``));
      expect(heading, `${row.flag} has no section`).toBeDefined();
    }
  });

  it('gives every row a smoke check that runs without node control', () => {
    for (const row of STATE_ROWS) {
      const checks = CHECK_INVENTORY.filter((check) => check.flag === row.flag && !check.needsControl);
      expect(checks.length, `${row.flag} has no control-free smoke check`).toBeGreaterThan(0);
      expect(inventory, `the section of ${row.flag} names its checks`).toContain(`\`${checks[0]!.name}\``);
    }
  });

  it('gates only the background rows by the active lease', () => {
    expect(STATE_ROWS.filter((row) => row.background).map((row) => row.flag)).toEqual([
      'ha.schedules',
      'ha.watches',
    ]);
  });
});
