/**
 * Recording flag changes: one audit event per change, whoever notices it first (the CLI that made it,
 * or the first node that reads a hand-edited file). The change and its event commit together.
 *
 * The database and the audit chain are handed in as a `FlagChangeLedger` (broker/flag-changes.ts makes
 * one of a pool), so flags/ depends on nothing of broker/.
 */
import type { FlagsAccess } from './access.js';
import { FLAGS, type FlagKey, type FlagMode } from './registry.js';

/** Flag changes are cluster-wide, not a mesh's: they go on their own chain, under this id. */
export const CLUSTER_CHAIN_ID = '00000000-0000-0000-0000-000000000000';

/** The statements a record runs inside its transaction (the shape of pg's client). */
export interface FlagSql {
  query<Row extends object>(text: string, values?: unknown[]): Promise<{ rows: Row[] }>;
}

/** The audit event of one change, on the cluster chain. */
export interface FlagChangedEvent {
  meshId: typeof CLUSTER_CHAIN_ID;
  eventType: 'flag.changed';
  actor: string;
  /**
   * `from`/`to`: what serves (shadow serves as off). `fromMode`/`toMode`: set when either side is shadow,
   * so that a move between off and shadow, which changes no served value, is on the record too.
   */
  payload: {
    environment: string;
    flag: FlagKey;
    from: boolean;
    to: boolean;
    fromMode?: FlagMode;
    toMode?: FlagMode;
  };
}

/**
 * Where flag changes are recorded: the database holding `flag_states`, and the audit chain's append inside
 * the same transaction (serialized with every other append to the chain, so it never forks).
 */
export interface FlagChangeLedger<Tx extends FlagSql = FlagSql> {
  /** Runs `work` in one transaction: committed when it returns, rolled back when it throws. */
  inTransaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
  /** Appends `event` to the cluster chain inside `tx`. */
  appendAudit(tx: Tx, event: FlagChangedEvent): Promise<void>;
}

export interface FlagChange {
  environment: string;
  flag: FlagKey;
  value: boolean;
  /** Who: an operator name for the CLI, `node:<id>` when a node noticed a change in its provider. */
  actor: string;
  /**
   * The provider's value before this change, when the caller read it: what the change is from while the
   * environment has no recorded state yet (a fresh cluster's preset is not the registry's default).
   */
  previous?: boolean;
  /** The change sets the flag to shadow (`value` is then false: what serves). */
  shadow?: boolean;
  /** The provider had the flag at shadow before the change (read by the caller). */
  previousShadow?: boolean;
}

/**
 * Records `change` unless the environment's flag already has that value; says what it was before.
 * `apply` (the CLI's write to the provider) runs under the flag's lock, before the commit: a node that
 * sees the new value meanwhile waits for the lock and then finds nothing left to record, and a failed
 * write records nothing.
 */
export async function recordFlagChange<Tx extends FlagSql>(
  ledger: FlagChangeLedger<Tx>,
  change: FlagChange,
  apply: () => Promise<void> = async () => {},
): Promise<{ changed: boolean; from: boolean }> {
  return ledger.inTransaction(async (client) => {
    // An advisory lock, not FOR UPDATE: it also serializes the very first record of a flag (no row yet).
    await client.query("SELECT pg_advisory_xact_lock(hashtextextended('flag:' || $1 || ':' || $2, 0))", [
      change.environment,
      change.flag,
    ]);
    const known = await client.query<{ value: boolean }>(
      'SELECT value FROM flag_states WHERE environment = $1 AND flag = $2',
      [change.environment, change.flag],
    );
    const from = known.rows[0]?.value ?? change.previous ?? FLAGS.find((f) => f.key === change.flag)!.default;
    await apply();
    const mode = (on: boolean, shadow: boolean | undefined): FlagMode =>
      on ? 'on' : shadow ? 'shadow' : 'off';
    const fromMode = mode(from, change.previousShadow);
    const toMode = mode(change.value, change.shadow);
    if (from === change.value && fromMode === toMode) {
      if (!known.rows[0]) await insertState(client, change);
      return { changed: false, from };
    }
    await insertState(client, change);
    const modes = fromMode === 'shadow' || toMode === 'shadow' ? { fromMode, toMode } : {};
    await ledger.appendAudit(client, {
      meshId: CLUSTER_CHAIN_ID,
      eventType: 'flag.changed',
      actor: change.actor,
      payload: { environment: change.environment, flag: change.flag, from, to: change.value, ...modes },
    });
    return { changed: true, from };
  });
}

async function insertState(client: FlagSql, change: FlagChange): Promise<void> {
  await client.query(
    `INSERT INTO flag_states (environment, flag, value, changed_by) VALUES ($1, $2, $3, $4)
     ON CONFLICT (environment, flag) DO UPDATE SET value = excluded.value, changed_by = excluded.changed_by, changed_at = now()`,
    [change.environment, change.flag, change.value, change.actor],
  );
}

/**
 * The one way a flag is changed at a provider (CLI, promotion, console, chaos): the provider's current
 * value read as what the change is from, the write made under the flag's lock and read back, the change
 * audited once. A write the provider does not show afterwards throws before the commit: no audit entry
 * for a change that did not happen.
 */
export async function changeFlag<Tx extends FlagSql>(
  ledger: FlagChangeLedger<Tx>,
  provider: FlagsAccess,
  change: Omit<FlagChange, 'previous' | 'previousShadow'>,
): Promise<{ changed: boolean; from: boolean }> {
  const shadow = change.shadow ?? false;
  if (shadow && change.value)
    throw new Error(`${change.flag}: shadow serves as off; its value must be false`);
  const previous = (await provider.read())[change.flag];
  const previousShadow = (await provider.readShadow()).includes(change.flag);
  return recordFlagChange(ledger, { ...change, previous, previousShadow }, async () => {
    await provider.write(change.flag, change.value, shadow);
    const readBack = (await provider.read())[change.flag];
    const readBackShadow = (await provider.readShadow()).includes(change.flag);
    if (readBack !== change.value || readBackShadow !== shadow)
      throw new FlagReadBackError(change, readBack, readBackShadow, provider.describe);
  });
}

/** The provider does not show the value just written: the change is not recorded. */
export class FlagReadBackError extends Error {
  constructor(
    change: Omit<FlagChange, 'previous'>,
    readBack: boolean,
    readBackShadow: boolean,
    where: string,
  ) {
    const show = (on: boolean, shadow: boolean | undefined) => (on ? 'on' : shadow ? 'shadow' : 'off');
    super(
      `${change.flag}: wrote ${show(change.value, change.shadow)} to ${where}, but it reads back ${show(readBack, readBackShadow)}; nothing audited`,
    );
  }
}
