/**
 * Planted bugs (docs/chaos.md § Planted bugs): one known defect at a time, switched on only for tests, to
 * prove that `workbench chaos` catches what it claims to catch. A plant is a single guarded branch at the
 * real spot of the code it breaks, so the code that runs is the production code with one check removed.
 *
 * The switch is refused unless the test variable is set too: WORKBENCH_PLANT alone (a stray variable in a
 * production environment) stops the broker at start-up as a configuration error, as does an unknown name.
 */

export interface PlantInfo {
  name: string;
  /** The file (and spot) it breaks. */
  where: string;
  /** What is wrong, in one line. */
  description: string;
  /** The anomaly kinds or chaos properties that name it; caught when the run names one of them. */
  expect: readonly string[];
  /** The fault kinds its chaos run uses (a plant that needs a fault to show); absent: every kind. */
  faults?: readonly string[];
  /** Not for `workbench chaos` (what names it is another test's check, e.g. shadow's comparisons). */
  notChaos?: true;
}

export const PLANTS = [
  {
    name: 'ack-before-commit',
    where: 'broker/delivery/messaging.ts (send)',
    description: "the sender's ack (`sent`) is answered before the message's transaction commits",
    expect: ['lost-write', 'no-loss'],
    faults: ['postgres-restart', 'postgres-crash', 'node-kill'],
  },
  {
    name: 'clock-unfenced',
    where: 'broker/clock/leadership.ts (acquire), broker/clock/clock.shared.ts (tick)',
    description: "a clock leader is elected without the mesh's lock and ticks without the epoch fence",
    expect: ['clock-nonincreasing', 'clock-epoch-regress', 'clock-increasing'],
  },
  {
    name: 'sdk-dedup-off',
    where: 'client/client.ts (onDurable, the RecentIds filter)',
    description:
      "the SDK hands a redelivered message to the application again (its dedup off; set by the chaos workload's peers)",
    expect: ['duplicate', 'no-duplicates'],
    faults: ['node-kill', 'node-drain'],
  },
  {
    name: 'feed-out-of-order',
    where: 'broker/delivery/feed.ts (wake)',
    description:
      'a hint beyond a gap is written at once, ahead of the items before it (the cursor passes them)',
    expect: ['internal-nonmonotonic', 'sender-order', 'skip', 'lost-write', 'no-loss'],
    faults: ['bus-loss', 'partition-peers'],
  },
  {
    name: 'lease-no-epoch',
    where: 'broker/lease/active-lease.ts (claim)',
    description: 'the active lease is claimed while another node holds it, without a new epoch',
    expect: ['lease-epochs'],
    faults: ['leader-pause', 'node-kill'],
  },
  {
    name: 'schedule-unclaimed',
    where: 'broker/schedules/scheduler.shared.ts (fire)',
    description: "a due schedule is fired without its claim (the schedule's lock and its occurrence row)",
    expect: ['schedule-fired-twice', 'schedules-once'],
  },
  {
    name: 'shadow-divergence',
    where: 'broker/shadow/runner.ts (compareOne)',
    description:
      "in shadow mode, the shared implementation's answer differs from the local one (a boolean negated, a list one entry off)",
    expect: ['shadow-disagree'],
    notChaos: true,
  },
] as const satisfies readonly PlantInfo[];

export type PlantName = (typeof PLANTS)[number]['name'];

export const PLANT_NAMES: readonly PlantName[] = PLANTS.map((plant) => plant.name);

/** The plants a chaos run can catch: what `workbench chaos --list-plants` prints and `--plant` takes. */
export const CHAOS_PLANT_NAMES: readonly PlantName[] = PLANTS.filter(
  (plant: PlantInfo) => plant.notChaos !== true,
).map((plant) => plant.name);

export function isPlantName(name: string): name is PlantName {
  return (PLANT_NAMES as readonly string[]).includes(name);
}

export function plantInfo(name: PlantName): PlantInfo {
  return PLANTS.find((plant) => plant.name === name)!;
}

/**
 * Regressions (docs/promotion.md § Analysis): not a broken guarantee for chaos to catch but a release
 * that is slower, switched on by a flip (only while the node acts on `whileFlag`), for the promotion's
 * analysis to catch during its bake and roll back. Same switch, same refusal as the plants.
 */
export const REGRESSIONS = [
  {
    name: 'delivery-slow',
    where: "broker/delivery/row.ts (the delivery.wake relay: another node's message to sessions here)",
    description:
      'every delivery of a message from another node waits 50 ms, while the node acts on ha.streams (the flip from phase 2 to 3 switches it on)',
    whileFlag: 'ha.streams',
    delayMs: 50,
  },
] as const;

export type RegressionName = (typeof REGRESSIONS)[number]['name'];

export function isRegressionName(name: string): name is RegressionName {
  return REGRESSIONS.some((regression) => regression.name === name);
}

/** What a plant or a regression is, in one line (the start-up warning). */
export function plantDescription(name: PlantName | RegressionName): string {
  return (
    PLANTS.find((plant) => plant.name === name)?.description ??
    REGRESSIONS.find((regression) => regression.name === name)!.description
  );
}

/** Why a plant was refused: the variable and a sentence (the broker turns it into a ConfigError). */
export class PlantRefused extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(message);
    this.name = 'PlantRefused';
  }
}

type Env = Record<string, string | undefined>;

/**
 * The plant the environment asks for: WORKBENCH_PLANT, honoured only with WORKBENCH_TEST_PLANTS=1.
 * Unset (or empty): none. Set without the test variable, or an unknown name: refused.
 */
export function activePlant(env: Env): PlantName | RegressionName | undefined {
  const name = env.WORKBENCH_PLANT?.trim();
  if (!name) return undefined;
  if (env.WORKBENCH_TEST_PLANTS !== '1')
    throw new PlantRefused(
      'WORKBENCH_PLANT',
      `plants a known bug for tests only; refused without WORKBENCH_TEST_PLANTS=1 (got "${name}")`,
    );
  if (!isPlantName(name) && !isRegressionName(name))
    throw new PlantRefused(
      'WORKBENCH_PLANT',
      `unknown plant "${name}" (known: ${[...PLANT_NAMES, ...REGRESSIONS.map((r) => r.name)].join(', ')})`,
    );
  return name;
}

/** The plant this process runs with: armed once at start-up from the checked configuration. */
let armed: PlantName | RegressionName | undefined;

export function armPlant(name: PlantName | RegressionName | undefined): void {
  armed = name;
}

/** Whether this plant is on: the guard of its one branch. */
export function planted(name: PlantName): boolean {
  return armed === name;
}

/** The flags this node acts on (the row reconciler says, after each pass), for a regression's trigger. */
const acting = new Set<string>();

export function plantFlagActing(flag: string, on: boolean): void {
  if (on) acting.add(flag);
  else acting.delete(flag);
}

/** A regression's delay now (ms): 0 unless it is armed and the node acts on its flag. */
export function regressionDelayMs(name: RegressionName): number {
  if (armed !== name) return 0;
  const regression = REGRESSIONS.find((r) => r.name === name)!;
  return acting.has(regression.whileFlag) ? regression.delayMs : 0;
}
