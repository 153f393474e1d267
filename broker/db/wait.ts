/**
 * A starting node waits for Postgres, bounded: in a compose stack or after a host reboot the broker often
 * starts before its database accepts connections, and exiting at the first refusal leaves the restart to a
 * supervisor that may not be there. Waiting for ever would hide a wrong address, so the wait has a bound
 * (STARTUP_DB_WAIT_MS) and every retry is logged with its error.
 */
import pg from 'pg';
import type { Logger } from '../log.js';
import { isDatabaseUnreachable, isNotPrimary } from './errors.js';
import { PrimaryFence } from './primary-fence.js';

export interface DatabaseWaitOptions {
  /** How long to keep trying; 0 means one attempt. */
  waitMs: number;
  log: Logger;
}

/** Longest pause between two attempts: a database that comes up is noticed within about this. */
const MAX_RETRY_DELAY_MS = 2000;
/** One attempt's connect timeout: a black-holed address must not eat the whole bound in one try. */
const CONNECT_TIMEOUT_MS = 3000;

/** The bound passed; its message carries the last attempt's error (not as `cause`: logs would repeat it). */
export class DatabaseWaitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DatabaseWaitError';
  }
}

/** `host:port/database` of a URL, for logs: never the password. */
export function describeDatabase(databaseUrl: string): string {
  const url = new URL(databaseUrl);
  return `${url.hostname}:${url.port || '5432'}${url.pathname}`;
}

/**
 * Resolves once Postgres at `databaseUrl` answers a query as the primary of record (not in recovery, not
 * read-only: broker/db/primary-fence.ts), so migrations never run on a standby. Retries only while the
 * database is unreachable (refused, reset, timed out, name not resolved, starting up) or not the primary (a
 * failover in progress promotes one soon); any other error, such as a wrong password or a missing database,
 * is thrown at once, since waiting would not change it.
 */
export async function waitForDatabase(databaseUrl: string, options: DatabaseWaitOptions): Promise<void> {
  const database = describeDatabase(databaseUrl);
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    const error = await tryOnce(databaseUrl);
    if (error === undefined) {
      if (attempt > 1)
        options.log.info({ database, attempt, waitedMs: Date.now() - started }, 'Postgres is up');
      return;
    }
    if (!isDatabaseUnreachable(error)) throw error;
    const waitedMs = Date.now() - started;
    const leftMs = options.waitMs - waitedMs;
    if (leftMs <= 0) {
      const outcome = isNotPrimary(error) ? 'was not the primary of record' : 'did not answer';
      throw new DatabaseWaitError(
        `Postgres at ${database} ${outcome} within ${Math.round(options.waitMs / 1000)} s ` +
          `(STARTUP_DB_WAIT_MS=${options.waitMs}; ${attempt} attempt${attempt === 1 ? '' : 's'}): ` +
          `${(error as Error).message}`,
      );
    }
    const retryInMs = Math.min(250 * 2 ** (attempt - 1), MAX_RETRY_DELAY_MS, leftMs);
    options.log.warn(
      { database, attempt, waitedMs, retryInMs, err: error },
      `waiting for Postgres at ${database}: ${(error as Error).message}`,
    );
    await new Promise((resolve) => setTimeout(resolve, retryInMs));
  }
}

/** One connection attempt; the error, or undefined when Postgres answered. */
async function tryOnce(databaseUrl: string): Promise<unknown> {
  const client = new pg.Client({
    connectionString: databaseUrl,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    application_name: 'mesh-broker-wait',
  });
  // A server that goes away right after accepting emits here; the attempt's query fails instead.
  client.on('error', () => {});
  try {
    await client.connect();
    await new PrimaryFence().verify(client);
    return undefined;
  } catch (error) {
    return error;
  } finally {
    await client.end().catch(() => {});
  }
}
