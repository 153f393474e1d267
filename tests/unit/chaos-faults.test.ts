import { describe, expect, it } from 'vitest';
import { FAULT_KINDS, MIN_SLOT_MS, maxFaults, planFaults } from '../../cli/chaos/faults.js';

const nodes = ['broker-1', 'broker-2', 'broker-3'];

describe('chaos fault schedule', () => {
  it('is a pure function of the seed: same seed, same times, kinds and targets', () => {
    const a = planFaults(42, { durationMs: 30 * 60_000, faults: 120, nodes });
    const b = planFaults(42, { durationMs: 30 * 60_000, faults: 120, nodes });
    expect(a).toEqual(b);
    expect(planFaults(43, { durationMs: 30 * 60_000, faults: 120, nodes })).not.toEqual(a);
  });

  it('has every kind in any run of six or more faults, spaced and inside the run', () => {
    for (const seed of [1, 7, 2024, 999_999_999]) {
      const plan = planFaults(seed, { durationMs: 60_000, faults: 6, nodes });
      expect(new Set(plan.map((f) => f.kind))).toEqual(new Set(FAULT_KINDS));
      for (let i = 1; i < plan.length; i++)
        expect(plan[i]!.atMs - plan[i - 1]!.atMs).toBeGreaterThanOrEqual((MIN_SLOT_MS * 2) / 3);
      expect(plan.at(-1)!.atMs).toBeLessThan(60_000 - 8000);
      for (const f of plan.filter((f) => f.kind.startsWith('node-'))) expect(nodes).toContain(f.target);
    }
  });

  it('never plans more faults than the run can space out', () => {
    expect(maxFaults(60_000)).toBe(7);
    expect(maxFaults(30 * 60_000)).toBeGreaterThanOrEqual(120);
  });
});
