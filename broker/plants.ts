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
  },
] as const satisfies readonly PlantInfo[];

export type PlantName = (typeof PLANTS)[number]['name'];

export const PLANT_NAMES: readonly PlantName[] = PLANTS.map((plant) => plant.name);

export function isPlantName(name: string): name is PlantName {
  return (PLANT_NAMES as readonly string[]).includes(name);
}

export function plantInfo(name: PlantName): PlantInfo {
  return PLANTS.find((plant) => plant.name === name)!;
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
export function activePlant(env: Env): PlantName | undefined {
  const name = env.WORKBENCH_PLANT?.trim();
  if (!name) return undefined;
  if (env.WORKBENCH_TEST_PLANTS !== '1')
    throw new PlantRefused(
      'WORKBENCH_PLANT',
      `plants a known bug for tests only; refused without WORKBENCH_TEST_PLANTS=1 (got "${name}")`,
    );
  if (!isPlantName(name))
    throw new PlantRefused('WORKBENCH_PLANT', `unknown plant "${name}" (known: ${PLANT_NAMES.join(', ')})`);
  return name;
}

/** The plant this process runs with: armed once at start-up from the checked configuration. */
let armed: PlantName | undefined;

export function armPlant(name: PlantName | undefined): void {
  armed = name;
}

/** Whether this plant is on: the guard of its one branch. */
export function planted(name: PlantName): boolean {
  return armed === name;
}
