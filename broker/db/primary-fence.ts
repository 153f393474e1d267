/**
 * The primary of record: a broker writes only through a connection whose server it has checked is a
 * writable primary on the newest timeline the broker has seen (docs/design.md § Fencing).
 *
 * Why a timeline: a promotion always starts a new timeline (Postgres's own epoch, bumped by `pg_promote`,
 * `pg_ctl promote` and Patroni alike), and an old primary that comes back after its replica was promoted is
 * still writable on the old one. `pg_is_in_recovery()` alone catches a demoted server (a standby), not that.
 * The timeline is read from the name of the current WAL file (its first 8 hex digits), which any role may
 * compute: `pg_control_checkpoint()` needs privileges and lags a promotion until the next checkpoint.
 *
 * Cost: one query when a connection is made, and again only after a suspicion (any connection-level error
 * or a write refused as read-only, seen when a client is released with an error); every other checkout is
 * an in-memory comparison (`admits`), so the hot path pays no round trip.
 *
 * What it does not do: remember timelines across restarts (a broker that never saw the new timeline cannot
 * tell an old primary from the current one: routing to the leader, e.g. HAProxy on Patroni's `/primary`,
 * and Patroni's own demotion do that), or tell two unrelated clusters on the same timeline apart.
 */
import type pg from 'pg';
import { NotPrimaryError, type NotPrimaryReason } from './errors.js';

/** The last verdict: `primary`, a reason for refusing, or `unknown` before the first check. */
export type PrimaryState = 'primary' | NotPrimaryReason | 'unknown';
export const PRIMARY_STATES: readonly PrimaryState[] = [
  'primary',
  'in_recovery',
  'read_only',
  'old_timeline',
  'unknown',
];

// One round trip; a standby has no current WAL position (pg_current_wal_lsn() fails there), hence the CASE.
// transaction_read_only, outside a transaction, is default_transaction_read_only (a server fenced by hand
// with ALTER SYSTEM) or true during recovery.
const CHECK_SQL = `SELECT pg_is_in_recovery() AS in_recovery,
       current_setting('transaction_read_only') = 'on' AS read_only,
       CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END AS timeline`;

/**
 * The check's own bound: a server that accepts a connection and then answers nothing (stalled, or a
 * partition) must not hold a checkout for ever. pg reports it as "Query read timeout" (an outage, errors.ts).
 */
const CHECK_TIMEOUT_MS = 3000;

// pg reads query_timeout from a query's config (lib/client.js); its types do not declare it.
const CHECK: pg.QueryConfig & { query_timeout: number } = {
  text: CHECK_SQL,
  query_timeout: CHECK_TIMEOUT_MS,
};

interface CheckRow {
  in_recovery: boolean;
  read_only: boolean;
  timeline: number | null;
}

interface Verified {
  generation: number;
  timeline: number;
}

export type PrimaryListener = (state: PrimaryState, timeline: number) => void;

export class PrimaryFence {
  private newestTimeline = 0;
  /** Bumped by every suspicion: a client verified under an older generation is checked again. */
  private generation = 0;
  private readonly verified = new WeakMap<pg.ClientBase, Verified>();
  private current: PrimaryState = 'unknown';

  constructor(private readonly onChange: PrimaryListener = () => {}) {}

  get state(): PrimaryState {
    return this.current;
  }

  /** The newest timeline a primary showed this broker (0 before the first check). */
  get timeline(): number {
    return this.newestTimeline;
  }

  /**
   * In memory, no round trip: `yes` when `client` passed a check since the last suspicion and is on the
   * newest timeline; `old_timeline` when a newer one was seen since; `check` when it must be checked.
   */
  admits(client: pg.ClientBase): 'yes' | 'old_timeline' | 'check' {
    const seen = this.verified.get(client);
    if (seen === undefined || seen.generation !== this.generation) return 'check';
    return seen.timeline < this.newestTimeline ? 'old_timeline' : 'yes';
  }

  /** Checks `client`'s server (one query); throws NotPrimaryError when it is not the primary of record. */
  async verify(client: pg.ClientBase): Promise<void> {
    const generation = this.generation;
    const { rows } = await client.query<CheckRow>(CHECK);
    const row = rows[0]!;
    if (row.in_recovery)
      throw this.refuse('in_recovery', 'the database server is in recovery (a standby), not the primary');
    if (row.read_only) throw this.refuse('read_only', 'the database server is read-only');
    const timeline = Number(row.timeline);
    if (timeline < this.newestTimeline)
      throw this.refuse(
        'old_timeline',
        `the database server is on timeline ${timeline}, older than timeline ${this.newestTimeline} seen: an old primary`,
      );
    const newer = timeline > this.newestTimeline;
    this.newestTimeline = timeline;
    this.verified.set(client, { generation, timeline });
    // A newer timeline is news even while the state stays `primary`: a promotion seen.
    this.set('primary', newer);
  }

  /** Refuses a client that `admits` found on an older timeline. */
  staleTimeline(client: pg.ClientBase): NotPrimaryError {
    const timeline = this.verified.get(client)?.timeline;
    return this.refuse(
      'old_timeline',
      `the connection's server is on timeline ${timeline}, older than timeline ${this.newestTimeline} seen since`,
    );
  }

  /**
   * A connection failed or a write was refused as read-only: the server behind the URL may have changed,
   * so every connection is checked again before its next use.
   */
  suspect(): void {
    this.generation++;
  }

  private refuse(reason: NotPrimaryReason, message: string): NotPrimaryError {
    this.set(reason);
    return new NotPrimaryError(reason, message);
  }

  private set(state: PrimaryState, newTimeline = false): void {
    if (state === this.current && !newTimeline) return;
    this.current = state;
    this.onChange(state, this.newestTimeline);
  }
}
