/**
 * `workbench chaos --plant NAME` (docs/chaos.md § Planted bugs): the brokers of the run start with one
 * known bug (broker/plants.ts), and the report says whether the run caught it: the verdict failed AND one
 * of the anomalies the plant is known by was named (a run that failed for another reason is no catch).
 */
import { CHAOS_PLANT_NAMES, type PlantName, plantInfo } from '../../broker/plants.js';
import { UsageError } from '../args.js';
import { type FaultKind, isFaultKind } from './faults.js';

export interface PlantVerdict {
  name: PlantName;
  caught: boolean;
  /** The expected anomaly (or property) the run named, when caught. */
  anomaly?: string;
  /** What would have counted as a catch. */
  expected: readonly string[];
}

/** `--plant NAME`: a known plant, or a usage error (exit 2, nothing started). */
export function plantOption(value: string | undefined): PlantName | undefined {
  if (value === undefined) return undefined;
  if (!(CHAOS_PLANT_NAMES as readonly string[]).includes(value))
    throw new UsageError(`unknown plant "${value}" (workbench chaos --list-plants lists them)`);
  return value as PlantName;
}

/** The brokers' switch: the plant, and the test variable without which they refuse it. */
export function plantEnv(plant: PlantName | undefined): Record<string, string> {
  return plant ? { WORKBENCH_TEST_PLANTS: '1', WORKBENCH_PLANT: plant } : {};
}

/** The fault kinds a plant's run uses by default (the ones it needs to show), or undefined: every kind. */
export function plantKinds(plant: PlantName | undefined): FaultKind[] | undefined {
  const kinds = plant ? plantInfo(plant).faults : undefined;
  return kinds ? kinds.filter(isFaultKind) : undefined;
}

/** `named`: the failed properties and the history's anomaly kinds of the run. */
export function judgePlant(plant: PlantName, runOk: boolean, named: ReadonlySet<string>): PlantVerdict {
  const expected = plantInfo(plant).expect;
  const anomaly = runOk ? undefined : expected.find((name) => named.has(name));
  return { name: plant, caught: anomaly !== undefined, ...(anomaly ? { anomaly } : {}), expected };
}
