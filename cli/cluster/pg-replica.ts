/**
 * A throw-away PostgreSQL primary and streaming replicas of it, for the two-region simulation
 * (`workbench up --phase 4`): region A's primary, region B's hot standby made with `pg_basebackup -R`
 * through a given host:port (the latency proxy between the regions, cli/proxies/latency-proxy.ts), so
 * replication pays the inter-region delay and stops when the link is cut.
 *
 * Built on ThrowawayPostgres (cli/chaos/services.ts), the one way the workbench and its tests make
 * throw-away clusters: initdb (or the base backup) as the `postgres` user, a free loopback port, fsync off,
 * trust authentication on loopback only.
 *
 * What it guarantees:
 * - The primary runs with wal_level=replica, enough WAL senders and replication slots, and a
 *   `replicator` role (REPLICATION LOGIN) that pg_hba lets replicate from 127.0.0.1.
 * - A replica is a real physical standby: base backup through `via`, `primary_conninfo` pointing at `via`
 *   (so streaming goes the same way), its own replication slot on the primary (the primary keeps the WAL
 *   a cut-off replica still needs, so it catches up after the link heals instead of needing a new backup),
 *   `hot_standby=on` (read-only queries are served; writes fail with "cannot execute … in a read-only
 *   transaction"). `start` resolves once it accepts connections and its WAL receiver is streaming.
 * - `lag()` reads the replica's distance from the primary in bytes of WAL and in time (see ReplicaLag).
 * - `promote()` ends recovery (`pg_promote`, waiting) and resolves once the replica accepts writes.
 * - `destroy()` stops a server and removes its folder (a replica's slot stays on its primary, which is
 *   throw-away too: a slot whose replica is gone makes the primary keep WAL); every server (ThrowawayPostgres)
 *   is also registered with cli/cluster/exit-cleanup.ts from its folder's first moment, so a run that fails,
 *   throws or is interrupted (SIGINT/SIGTERM), even in the middle of initdb, removes it.
 *
 * What it does not do: synchronous replication (commits never wait for the replica: what a promotion
 * loses is what the replica had not received), cascading replicas, archiving or point-in-time recovery,
 * passwords or TLS (loopback only), or fencing the old primary after a promotion (the caller stops it:
 * two primaries is the split brain the simulation must show, not hide).
 */
import pg from 'pg';
import { runAsPostgres, ThrowawayPostgres } from '../chaos/services.js';

export const REPLICATION_ROLE = 'replicator';

/** Enough for a few replicas and pg_basebackup's own stream, with room to spare. */
const MAX_WAL_SENDERS = 10;
/** From a started standby to a streaming one: one connection through the proxy, seconds at most. */
const STREAMING_TIMEOUT_MS = 30_000;

/** A throw-away server (which removes itself when the process ends, unless destroyed before). */
abstract class RegisteredServer {
  protected constructor(readonly server: ThrowawayPostgres) {}

  get port(): number {
    return this.server.port;
  }

  get url(): string {
    return this.server.url;
  }

  get dataDir(): string {
    return this.server.dataDir;
  }

  /** Runs one statement on its own connection (to the `postgres` database). */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    const client = new pg.Client({ connectionString: this.url });
    await client.connect();
    try {
      return await client.query<R>(text, values);
    } finally {
      await client.end();
    }
  }

  /** Stops the server (immediately: nothing to save) and removes its folder. Idempotent. */
  destroy(): void {
    this.server.destroy();
  }
}

export class PostgresPrimary extends RegisteredServer {
  private slots = 0;

  /** Starts a primary ready for streaming replicas (settings, role and pg_hba entry). */
  static async start(): Promise<PostgresPrimary> {
    const server = await ThrowawayPostgres.create({
      settings: {
        wal_level: 'replica',
        max_wal_senders: MAX_WAL_SENDERS,
        max_replication_slots: MAX_WAL_SENDERS,
        hot_standby: 'on', // inherited by replicas through the base backup
        // Feedback at least once a second, so lag readings on the primary side are fresh.
        wal_receiver_status_interval: '1s',
      },
      // Loopback only: the proxy connects from 127.0.0.1, and nothing else can reach these ports.
      hba: [`host replication ${REPLICATION_ROLE} 127.0.0.1/32 trust`],
    });
    const primary = new PostgresPrimary(server);
    try {
      await primary.query(`CREATE ROLE ${REPLICATION_ROLE} WITH REPLICATION LOGIN`);
    } catch (error) {
      primary.destroy();
      throw error;
    }
    return primary;
  }

  /** The primary's current WAL write position. */
  async currentLsn(): Promise<string> {
    return (await this.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
  }

  /** @internal A slot name unique on this primary. */
  nextSlotName(): string {
    return `replica_${++this.slots}`;
  }
}

export interface ReplicaOptions {
  /**
   * Where the replica reaches the primary, for the base backup and for streaming: the latency proxy's
   * address in the simulation (default: the primary's own port, no delay).
   */
  via?: { host?: string; port: number };
}

/** How far a replica is behind its primary at one moment. */
export interface ReplicaLag {
  /** The primary's current WAL position, and what the replica has received and replayed of it. */
  primaryLsn: string;
  receivedLsn: string | null;
  replayedLsn: string;
  /**
   * WAL bytes the primary has written and the replica has not replayed. The replica is read before the
   * primary, so this never reads below the truth (it may include WAL written between the two reads).
   */
  bytes: number;
  /**
   * How old the newest transaction the replica has replayed is (now() − pg_last_xact_replay_timestamp(),
   * on the replica's clock, which is the primary's on this machine): the time lag while the primary keeps
   * committing. It grows on an idle primary too, so `ms` is 0 whenever `bytes` is 0. null before the
   * replica has replayed any transaction.
   */
  lastReplayAgeMs: number | null;
  /** The lag in time: 0 when caught up, else lastReplayAgeMs. */
  ms: number | null;
}

export class PostgresReplica extends RegisteredServer {
  private constructor(
    server: ThrowawayPostgres,
    readonly primary: PostgresPrimary,
    readonly slot: string,
  ) {
    super(server);
  }

  /**
   * Makes a hot standby of `primary` with pg_basebackup -R through `via` (its own replication slot,
   * WAL streamed during the backup), starts it, and resolves once it accepts read-only connections.
   */
  static async start(primary: PostgresPrimary, options: ReplicaOptions = {}): Promise<PostgresReplica> {
    const host = options.via?.host ?? '127.0.0.1';
    const port = options.via?.port ?? primary.port;
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw new RangeError(`replica via port must be an integer from 1 to 65535, not ${port}`);
    const slot = primary.nextSlotName();
    const server = await ThrowawayPostgres.create({
      initialize: async (dataDir) => {
        await runAsPostgres('pg_basebackup', [
          '--pgdata',
          dataDir,
          `--dbname=host=${host} port=${port} user=${REPLICATION_ROLE} application_name=${slot}`,
          '--write-recovery-conf', // standby.signal + primary_conninfo through `via`, primary_slot_name
          '--wal-method=stream',
          '--create-slot',
          `--slot=${slot}`,
          '--checkpoint=fast', // a throw-away primary: no reason to wait for a spread checkpoint
          '--no-sync',
        ]);
      },
    });
    const replica = new PostgresReplica(server, primary, slot);
    try {
      await replica.streaming(STREAMING_TIMEOUT_MS);
    } catch (error) {
      replica.destroy();
      throw error;
    }
    return replica;
  }

  /**
   * Resolves once its WAL receiver streams from the primary: `pg_ctl start` returns when the standby
   * accepts connections, which is before its first connection to the primary (through `via`) is made.
   */
  private async streaming(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { rows } = await this.query<{ status: string }>('SELECT status FROM pg_stat_wal_receiver');
      if (rows[0]?.status === 'streaming') return;
      if (Date.now() > deadline)
        throw new Error(
          `replica on port ${this.port} is not streaming from its primary after ${timeoutMs} ms ` +
            `(receiver: ${rows[0]?.status ?? 'not running'})`,
        );
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** True while it is a standby (before `promote`). */
  async inRecovery(): Promise<boolean> {
    return (await this.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r')).rows[0]!.r;
  }

  /** Reads the lag now (see ReplicaLag): the replica first, then the primary. */
  async lag(): Promise<ReplicaLag> {
    const replica = (
      await this.query<{
        standby: boolean;
        received: string | null;
        replayed: string | null;
        age_ms: number | null;
      }>(
        `SELECT pg_is_in_recovery() AS standby,
                pg_last_wal_receive_lsn()::text AS received, pg_last_wal_replay_lsn()::text AS replayed,
                (extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000)::float8 AS age_ms`,
      )
    ).rows[0]!;
    // A promoted replica keeps its last replay position: the question no longer means anything.
    if (!replica.standby || replica.replayed === null)
      throw new Error(`the server on port ${this.port} is not a standby`);
    const primaryLsn = await this.primary.currentLsn();
    const { rows } = await this.primary.query<{ bytes: string }>(
      'SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::text AS bytes',
      [primaryLsn, replica.replayed],
    );
    const bytes = Number(rows[0]!.bytes);
    const age = replica.age_ms === null ? null : Math.max(0, replica.age_ms);
    return {
      primaryLsn,
      receivedLsn: replica.received,
      replayedLsn: replica.replayed,
      bytes: Math.max(0, bytes),
      lastReplayAgeMs: age,
      ms: bytes <= 0 ? 0 : age,
    };
  }

  /**
   * Resolves once the replica has replayed everything the primary had written when called (a read on
   * the replica then sees every write committed before it); rejects after `timeoutMs`.
   */
  async caughtUp(timeoutMs = 10_000): Promise<void> {
    const target = await this.primary.currentLsn();
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { rows } = await this.query<{ done: boolean }>(
        'SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false) AS done',
        [target],
      );
      if (rows[0]!.done) return;
      if (Date.now() > deadline)
        throw new Error(`replica on port ${this.port} did not replay up to ${target} within ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /**
   * Promotes it to a primary (`pg_promote`, waiting up to 60 s) and resolves once it accepts writes. The
   * old primary keeps running: fencing it is the caller's decision.
   */
  async promote(): Promise<void> {
    const { rows } = await this.query<{ promoted: boolean }>(
      'SELECT pg_promote(wait => true, wait_seconds => 60) AS promoted',
    );
    if (!rows[0]!.promoted) throw new Error(`replica on port ${this.port} did not finish promotion in 60 s`);
    if (await this.inRecovery()) throw new Error(`replica on port ${this.port} is still in recovery`);
  }
}
