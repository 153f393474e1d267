import pg from 'pg';
import { isDatabaseUnreachable } from './errors.js';
import type { PrimaryFence } from './primary-fence.js';
import { countRoundTrips, type RoundTripCounter } from './round-trips.js';

// Postgres `bigint` (int8) columns hold ids and sequence numbers far below 2^53: read them as numbers,
// alone and in arrays (array_agg of ids).
const INT8_ARRAY_OID = 1016 as (typeof pg.types.builtins)[keyof typeof pg.types.builtins];
const parseInt8ArrayAsStrings = pg.types.getTypeParser(INT8_ARRAY_OID) as (value: string) => string[];
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));
pg.types.setTypeParser(INT8_ARRAY_OID, (value) => parseInt8ArrayAsStrings(value).map(Number));

export type Pool = pg.Pool;

/**
 * The search_path of every pooled connection, set at connect (a startup option, no round trip): names resolve
 * in public, never in a schema the role's or the server's default search_path puts first. pg_temp is named
 * last: left out, Postgres would search the session's temp schema first, so a temp table named like one of
 * ours would shadow it (docs/design.md § Database roles).
 */
export const PINNED_SEARCH_PATH = 'pg_catalog,public,pg_temp';

/**
 * `databaseUrl` without its `options` parameter, and those options with the pinned search_path after them
 * (the last -c of a setting wins): the URL's own options would otherwise replace the pool's.
 */
export function pinnedConnection(databaseUrl: string): { connectionString: string; options: string } {
  const pinned = `-c search_path=${PINNED_SEARCH_PATH}`;
  const url = new URL(databaseUrl);
  const own = url.searchParams.get('options');
  if (own === null) return { connectionString: databaseUrl, options: pinned };
  url.searchParams.delete('options');
  return { connectionString: url.toString(), options: `${own} ${pinned}` };
}

export type PoolClient = pg.PoolClient;

export interface PoolOptions {
  max?: number;
  /** Name shown in pg_stat_activity, so an operator can tell which node holds which connection. */
  applicationName?: string;
  /**
   * The primary-of-record check for a pool that writes (DATABASE_URL's): every connection is checked
   * before its first use and after a suspicion (broker/db/primary-fence.ts). Unset for the lag-tolerant
   * read pool, which is a replica by design.
   */
  fence?: PrimaryFence;
  /** Told of every round trip a client of the pool makes (the node's metric: broker/db/round-trips.ts). */
  onRoundTrip?: RoundTripCounter;
}

type ConnectCallback = (
  err: Error | undefined,
  client: pg.PoolClient | undefined,
  done: (release?: Error | boolean) => void,
) => void;

/**
 * A pool that hands out only connections its fence admits. `pool.query` checks out through `connect` as
 * well (pg-pool's query calls this.connect), so every use of the pool passes here.
 */
class FencedPool extends pg.Pool {
  constructor(
    config: pg.PoolConfig,
    private readonly fence: PrimaryFence,
  ) {
    super(config);
    // A connection-level error or a write refused as read-only, on any client: the server behind the
    // URL may be another one now, so every connection is checked again before its next use.
    this.on('release', (error) => {
      if (error instanceof Error && isDatabaseUnreachable(error)) fence.suspect();
    });
  }

  override connect(): Promise<pg.PoolClient>;
  override connect(callback: ConnectCallback): void;
  override connect(callback?: ConnectCallback): Promise<pg.PoolClient> | undefined {
    const admitted = this.admitted();
    if (callback === undefined) return admitted;
    admitted.then(
      (client) => callback(undefined, client, client.release),
      (error: Error) => callback(error, undefined, () => {}),
    );
    return undefined;
  }

  private async admitted(): Promise<pg.PoolClient> {
    const client = await super.connect();
    const verdict = this.fence.admits(client);
    if (verdict === 'yes') return client;
    try {
      if (verdict === 'old_timeline') throw this.fence.staleTimeline(client);
      await this.fence.verify(client);
      return client;
    } catch (error) {
      // Thrown away, not returned: a refused connection is never used again.
      client.release(error as Error);
      throw error;
    }
  }
}

/**
 * A connection pool with the settings every part of the broker wants: TCP keepalive so a dead server is
 * noticed, bounded connect time so /health answers quickly while the database is down, and, given a fence,
 * only connections to the primary of record.
 */
export function createPool(databaseUrl: string, options: PoolOptions = {}): pg.Pool {
  const config: pg.PoolConfig = {
    ...pinnedConnection(databaseUrl),
    max: options.max ?? 10,
    connectionTimeoutMillis: 3000,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    application_name: options.applicationName ?? 'mesh-broker',
  };
  const pool = options.fence ? new FencedPool(config, options.fence) : new pg.Pool(config);
  // An idle client that loses its server emits here; without a listener the process would crash.
  pool.on('error', () => {});
  const counted = options.onRoundTrip;
  if (counted) pool.on('connect', (client) => countRoundTrips(client, counted));
  return pool;
}

/** Runs `work` in a transaction on one client, committing on success and rolling back on any error. */
export async function inTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  // A checked-out client has no error listener of the pool's: a server that goes away between two
  // statements would emit an unhandled 'error' and end the process. The statement in flight (or the next
  // one) fails instead, and the broken client is thrown away rather than returned to the pool.
  let broken: Error | undefined;
  const onError = (error: Error) => {
    broken = error;
  };
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    if (isDatabaseUnreachable(error)) broken ??= error as Error;
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}
