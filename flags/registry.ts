/**
 * Every runtime flag of the broker, and the only place flag names are written. One flag per row of the
 * state inventory (docs/design.md §2) that has an HA mechanism, plus the phase-1 active lease. A flag on means
 * "this node uses the shared implementation of the row"; off means the single-node one.
 */
export const FLAGS = [
  {
    key: 'ha.presence',
    row: 'presence / sessions',
    phase: 1,
    default: false,
    description:
      'Presence rows are the truth: per-node clear, dead nodes reaped, reattach on any node, cluster-wide peers.list and nonces',
  },
  {
    key: 'ha.active-lease',
    row: 'background work on a warm standby',
    phase: 1,
    default: false,
    description:
      'Schedules, watches, clocks and sweeps run only on the node holding the cluster active lease',
  },
  {
    key: 'ha.delivery',
    row: 'direct / broadcast / group delivery',
    phase: 2,
    default: false,
    description:
      'Per-recipient rows in seq order, read by each session feed; wake-ups over Redis to the nodes holding a recipient, a periodic check as backstop',
  },
  {
    key: 'ha.connection-cap',
    row: 'connectionsPerMesh (cap)',
    phase: 2,
    default: false,
    description: 'One per-mesh connection count in Redis, with per-node parts that expire when a node dies',
  },
  {
    key: 'ha.rate-limits',
    row: 'send / hook / token rate limits',
    phase: 2,
    default: false,
    description: 'One bucket per key in Redis, shared by every node (atomic)',
  },
  {
    key: 'ha.streams',
    row: 'streamSubscriptions',
    phase: 3,
    default: false,
    description: 'Stream publishes fan out over Redis pub/sub to subscribers on every node',
  },
  {
    key: 'ha.clock',
    row: 'meshClocks',
    phase: 3,
    default: false,
    description:
      'One clock leader per mesh (Postgres advisory lock, fenced by epoch); ticks reach every node',
  },
  {
    key: 'ha.mcp',
    row: 'mcpRegistry + call resolvers',
    phase: 3,
    default: false,
    description: 'MCP registry rows in Postgres; calls and results routed node to node over the bus',
  },
  {
    key: 'ha.schedules',
    row: 'scheduledMessages',
    phase: 3,
    default: false,
    description:
      'Each occurrence fires exactly once under pg_advisory_xact_lock with a unique occurrence record',
  },
  {
    key: 'ha.watches',
    row: 'urlWatches',
    phase: 3,
    default: false,
    description: 'Each watch owned by one node through a lease; survivors adopt orphans',
  },
  {
    key: 'ha.audit',
    row: 'audit lastHash',
    phase: 3,
    default: false,
    description:
      'Each append locks the chain head in its transaction: one chain, whatever the number of writers',
  },
  {
    key: 'ha.regions',
    row: 'reads and home region',
    phase: 4,
    default: false,
    description:
      "Lag-tolerant list reads on the region's replica (DATABASE_READ_URL); a mesh's clock, schedules and watches taken by its home region's nodes while one is alive",
  },
] as const;

export type FlagKey = (typeof FLAGS)[number]['key'];
export type FlagValues = Record<FlagKey, boolean>;

/**
 * A flag's three values: `off` (the local implementation), `on` (the shared one) and `shadow` (the local
 * one serves, the shared one runs beside it read-only or on a shadow copy and what each would answer is
 * compared: docs/flags.md § Shadow). `FlagValues` carries what serves (shadow is `false` there), and the
 * flags in shadow travel beside it (`FlagSnapshot.shadow`), so every reader of `FlagValues` keeps serving
 * from the local implementation without knowing shadow exists.
 */
export const FLAG_MODES = ['off', 'shadow', 'on'] as const;
export type FlagMode = (typeof FLAG_MODES)[number];

/** A flag value as a flags file or an Unleash variant spells it: true/false, "on"/"off" or "shadow". */
export function parseFlagMode(value: unknown): FlagMode | undefined {
  if (value === true || value === 'on') return 'on';
  if (value === false || value === 'off') return 'off';
  if (value === 'shadow') return 'shadow';
  return undefined;
}

/** A flag's mode from the serving values and the flags in shadow. */
export function flagMode(values: FlagValues, shadow: readonly FlagKey[], key: FlagKey): FlagMode {
  return values[key] ? 'on' : shadow.includes(key) ? 'shadow' : 'off';
}

export const FLAG_KEYS: readonly FlagKey[] = FLAGS.map((flag) => flag.key);

export function isFlagKey(key: string): key is FlagKey {
  return (FLAG_KEYS as readonly string[]).includes(key);
}

export function defaultFlagValues(): FlagValues {
  return Object.fromEntries(FLAGS.map((flag) => [flag.key, flag.default])) as FlagValues;
}

/** The flags a phase turns on: every flag of that phase or an earlier one. */
export function phasePreset(phase: number): FlagValues {
  return Object.fromEntries(FLAGS.map((flag) => [flag.key, flag.phase <= phase])) as FlagValues;
}
