/**
 * The planted-bug switch (broker/plants.ts, docs/chaos.md § Planted bugs): WORKBENCH_PLANT is honoured only
 * with WORKBENCH_TEST_PLANTS=1, an unknown name is refused, the broker's configuration turns either refusal
 * into a ConfigError (exit 2), and a chaos verdict counts a catch only when the run failed naming the
 * plant's own anomaly.
 */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../broker/config.js';
import {
  activePlant,
  armPlant,
  CHAOS_PLANT_NAMES,
  PLANT_NAMES,
  PLANTS,
  PlantRefused,
  plantFlagActing,
  regressionDelayMs,
} from '../../broker/plants.js';
import { UsageError } from '../../cli/args.js';
import { isFaultKind } from '../../cli/chaos/faults.js';
import { LeaseWatch } from '../../cli/chaos/lease-watch.js';
import { judgePlant, plantEnv, plantKinds, plantOption } from '../../cli/chaos/plants.js';
import { MINIMAL_ENV as BASE, configErrorFor } from '../helpers/config.js';

describe('the plant switch', () => {
  it('is off when WORKBENCH_PLANT is unset or empty', () => {
    expect(activePlant({})).toBeUndefined();
    expect(activePlant({ WORKBENCH_PLANT: '', WORKBENCH_TEST_PLANTS: '1' })).toBeUndefined();
  });

  it('refuses a plant without WORKBENCH_TEST_PLANTS=1', () => {
    expect(() => activePlant({ WORKBENCH_PLANT: 'clock-unfenced' })).toThrow(PlantRefused);
    expect(() => activePlant({ WORKBENCH_PLANT: 'clock-unfenced', WORKBENCH_TEST_PLANTS: 'true' })).toThrow(
      /WORKBENCH_TEST_PLANTS=1/,
    );
  });

  it('refuses an unknown name, even with the test variable', () => {
    expect(() => activePlant({ WORKBENCH_PLANT: 'no-such', WORKBENCH_TEST_PLANTS: '1' })).toThrow(
      /unknown plant "no-such"/,
    );
  });

  it('returns a known plant with the test variable', () => {
    for (const name of PLANT_NAMES)
      expect(activePlant({ WORKBENCH_PLANT: name, WORKBENCH_TEST_PLANTS: '1' })).toBe(name);
  });

  it("is a configuration error of the broker's (the variable named)", () => {
    expect(configErrorFor({ WORKBENCH_PLANT: 'feed-out-of-order' }).variable).toBe('WORKBENCH_PLANT');
    expect(configErrorFor({ WORKBENCH_PLANT: 'nope', WORKBENCH_TEST_PLANTS: '1' }).message).toMatch(
      /unknown plant/,
    );
    expect(loadConfig({ ...BASE }).plant).toBeUndefined();
    expect(
      loadConfig({ ...BASE, WORKBENCH_PLANT: 'feed-out-of-order', WORKBENCH_TEST_PLANTS: '1' }).plant,
    ).toBe('feed-out-of-order');
  });
});

describe('the plant list', () => {
  it('has at least the six plants of issue 26, each named once, with an anomaly and real fault kinds', () => {
    expect(PLANT_NAMES.length).toBeGreaterThanOrEqual(6);
    expect(new Set(PLANT_NAMES).size).toBe(PLANT_NAMES.length);
    for (const plant of PLANTS) {
      expect(plant.expect.length, plant.name).toBeGreaterThan(0);
      const faults: readonly string[] = 'faults' in plant ? plant.faults : [];
      expect(
        faults.filter((kind) => !isFaultKind(kind)),
        plant.name,
      ).toEqual([]);
    }
  });

  it('gives chaos the brokers’ switch and the fault kinds', () => {
    expect(plantEnv(undefined)).toEqual({});
    expect(plantEnv('clock-unfenced')).toEqual({
      WORKBENCH_TEST_PLANTS: '1',
      WORKBENCH_PLANT: 'clock-unfenced',
    });
    expect(plantKinds(undefined)).toBeUndefined();
    expect(plantKinds('feed-out-of-order')).toEqual(['bus-loss', 'partition-peers']);
    expect(plantOption('sdk-dedup-off')).toBe('sdk-dedup-off');
    expect(() => plantOption('nope')).toThrow(UsageError);
  });
});

describe('a plant verdict', () => {
  it('is a catch only when the run failed naming one of its anomalies', () => {
    const named = new Set(['history', 'clock-nonincreasing']);
    expect(judgePlant('clock-unfenced', false, named)).toMatchObject({
      caught: true,
      anomaly: 'clock-nonincreasing',
    });
    // Failed, but for another reason.
    expect(judgePlant('schedule-unclaimed', false, named).caught).toBe(false);
    // Passed: nothing caught, whatever was named.
    expect(judgePlant('clock-unfenced', true, named).caught).toBe(false);
  });
});

describe('the lease watch (lease-epochs)', () => {
  it('passes holders that change with a higher epoch, fails one without, and an epoch going back', () => {
    const clean = new LeaseWatch();
    for (const sample of [
      { holder: 'broker-1', epoch: 1 },
      { holder: 'broker-1', epoch: 1 },
      { holder: 'broker-2', epoch: 2 },
    ])
      clean.observe(sample);
    expect(clean.property()).toMatchObject({ ok: true, name: 'lease-epochs' });

    const stolen = new LeaseWatch();
    stolen.observe({ holder: 'broker-1', epoch: 3 });
    stolen.observe({ holder: 'broker-2', epoch: 3 });
    stolen.observe({ holder: 'broker-2', epoch: 2 });
    expect(stolen.property().ok).toBe(false);
    expect(stolen.property().problems).toEqual([
      'broker-1 (epoch 3) then broker-2 (epoch 3): another holder without a new epoch',
      'broker-2 (epoch 3) then broker-2 (epoch 2): the epoch went back',
    ]);
  });

  it('fails when the row was never read (nothing judged)', () => {
    expect(new LeaseWatch().property().ok).toBe(false);
  });
});

describe('shadow-divergence: a plant for the shadow comparisons, not for chaos', () => {
  it('is switched like the others but neither listed by chaos nor taken by --plant (no chaos run names it)', () => {
    expect(PLANT_NAMES).toContain('shadow-divergence');
    expect(CHAOS_PLANT_NAMES).not.toContain('shadow-divergence');
    expect(CHAOS_PLANT_NAMES).toContain('clock-unfenced');
    expect(() => plantOption('shadow-divergence')).toThrow(UsageError);
  });
});

describe('the regression delivery-slow (docs/promotion.md § Analysis)', () => {
  it('has the same switch: refused without WORKBENCH_TEST_PLANTS=1, not a chaos plant', () => {
    expect(() => activePlant({ WORKBENCH_PLANT: 'delivery-slow' })).toThrow(/WORKBENCH_TEST_PLANTS=1/);
    expect(activePlant({ WORKBENCH_PLANT: 'delivery-slow', WORKBENCH_TEST_PLANTS: '1' })).toBe(
      'delivery-slow',
    );
    expect(PLANT_NAMES).not.toContain('delivery-slow');
    expect(() => plantOption('delivery-slow')).toThrow(UsageError);
  });

  it('delays 50 ms only while armed and the node acts on ha.streams (the flip from phase 2 to 3)', () => {
    try {
      plantFlagActing('ha.streams', true);
      expect(regressionDelayMs('delivery-slow')).toBe(0);
      armPlant('delivery-slow');
      expect(regressionDelayMs('delivery-slow')).toBe(50);
      plantFlagActing('ha.streams', false);
      expect(regressionDelayMs('delivery-slow')).toBe(0);
    } finally {
      armPlant(undefined);
      plantFlagActing('ha.streams', false);
    }
  });
});
