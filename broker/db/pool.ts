import pg from 'pg';
import { isDatabaseUnreachable } from './errors.js';

// Postgres `bigint` (int8) columns hold ids and sequence numbers far below 2^53: read them as numbers,
// alone and in arrays (array_agg of ids).
const INT8_ARRAY_OID = 1016 as (typeof pg.types.builtins)[keyof typeof pg.types.builtins];
const parseInt8ArrayAsStrings = pg.types.getTypeParser(INT8_ARRAY_OID) as (value: string) => string[];
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));
pg.types.setTypeParser(INT8_ARRAY_OID, (value) => parseInt8ArrayAsStrings(value).map(Number));

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

export interface PoolOptions {
  max?: number;
  /** Name shown in pg_stat_activity, so an operator can tell which node holds which connection. */
  applicationName?: string;
}

/**
 * A connection pool with the settings every part of the broker wants: TCP keepalive so a dead server is
 * noticed, bounded connect time so /health answers quickly while the database is down.
 */
export function createPool(databaseUrl: string, options: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: options.max ?? 10,
    connectionTimeoutMillis: 3000,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    application_name: options.applicationName ?? 'mesh-broker',
  });
  // An idle client that loses its server emits here; without a listener the process would crash.
  pool.on('error', () => {});
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
