/**
 * One promotion of an environment at a time (issue 27 item 1): a session advisory lock in the database the
 * environment's brokers use, keyed by the environment's name, held on a connection of its own for the whole
 * promotion. Its holder and time are what Postgres shows of that connection: its application_name
 * (`workbench-promote ACTOR@HOST:PID`) and backend_start. No table: a lock cannot outlive its holder, since
 * Postgres drops it when the connection ends (the process exits or is killed, its machine goes away).
 *
 * Stale rule: a holder whose process is alive but stuck keeps its lock. `--force-unlock` ends that holder's
 * connection (pg_terminate_backend) once its lock is older than PROMOTION_LOCK_STALE_MS, and takes the lock;
 * a younger lock is refused even then.
 */
import { hostname } from 'node:os';
import pg from 'pg';
import { pinnedConnection } from '../../broker/db/pool.js';

/** A lock older than this may be taken over with `--force-unlock` (a promotion takes minutes, not half an hour). */
export const PROMOTION_LOCK_STALE_MS = 30 * 60_000;

/** The advisory lock's key (a bigint) for an environment: the same on every machine. */
export const LOCK_KEY_SQL = `hashtextextended('workbench-promote:' || $1, 0)`;

export interface LockHolder {
  holder: string;
  since: Date;
  pid: number;
}

export type LockResult =
  | { held: true; release: () => Promise<void>; lost: () => boolean; forced?: LockHolder }
  | { held: false; holder: LockHolder | undefined; reason: string };

/**
 * Who holds environment's lock (pg_locks: a bigint key is classid's 32 bits then objid's). Any connection
 * of the environment's database can ask (the console and `status` do, from their pools).
 */
export async function lockHolder(
  client: pg.Client | pg.Pool,
  environment: string,
): Promise<LockHolder | undefined> {
  const result = await client.query<LockHolder>(
    `SELECT a.application_name AS holder, a.backend_start AS since, a.pid
       FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND ((l.classid::bigint << 32) | l.objid::bigint) = ${LOCK_KEY_SQL}`,
    [environment],
  );
  return result.rows[0];
}

async function tryLock(client: pg.Client, environment: string): Promise<boolean> {
  const result = await client.query<{ locked: boolean }>(
    `SELECT pg_try_advisory_lock(${LOCK_KEY_SQL}) AS locked`,
    [environment],
  );
  return result.rows[0]!.locked;
}

/** Ends a stale holder's connection and waits (at most 5 s) until Postgres has dropped its lock. */
async function takeOver(client: pg.Client, environment: string, stale: LockHolder): Promise<boolean> {
  await client.query('SELECT pg_terminate_backend($1)', [stale.pid]);
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    if (await tryLock(client, environment)) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return false;
}

/** The application_name a lock's connection shows (Postgres keeps its first 63 bytes). */
export function holderName(actor: string): string {
  return `workbench-promote ${actor}@${hostname()}:${process.pid}`.slice(0, 63);
}

/**
 * Takes environment's promotion lock, or says who holds it. With `forceUnlock`, a lock older than
 * `staleMs` (PROMOTION_LOCK_STALE_MS; a test passes less) is taken over.
 */
export async function acquirePromotionLock(
  databaseUrl: string,
  environment: string,
  actor: string,
  forceUnlock = false,
  staleMs = PROMOTION_LOCK_STALE_MS,
): Promise<LockResult> {
  const { connectionString, options } = pinnedConnection(databaseUrl);
  const client = new pg.Client({
    connectionString,
    options,
    application_name: holderName(actor),
    keepAlive: true,
  });
  let lost = false;
  // A connection ended under the lock (a --force-unlock, the database restarted): the lock is gone.
  client.on('error', () => {
    lost = true;
  });
  client.on('end', () => {
    lost = true;
  });
  await client.connect();
  const locked = () => ({
    held: true as const,
    lost: () => lost,
    release: async () => {
      await client.end().catch(() => {});
    },
  });
  try {
    if (await tryLock(client, environment)) return locked();
    const holder = await lockHolder(client, environment);
    const ageMs = holder ? Date.now() - holder.since.getTime() : 0;
    if (holder && forceUnlock && ageMs >= staleMs) {
      if (await takeOver(client, environment, holder)) return { ...locked(), forced: holder };
    }
    await client.end();
    const who = holder
      ? `${holder.holder} (since ${holder.since.toISOString()}, ${Math.round(ageMs / 1000)} s ago)`
      : 'another promotion';
    const hint =
      forceUnlock && holder
        ? `: --force-unlock takes only a lock older than ${Math.round(staleMs / 60_000)} minutes`
        : '';
    return {
      held: false,
      holder,
      reason: `another promotion of ${environment} holds the lock: ${who}${hint}`,
    };
  } catch (error) {
    await client.end().catch(() => {});
    throw error;
  }
}
