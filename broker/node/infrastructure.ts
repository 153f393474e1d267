/**
 * A node's connections to the outside: Postgres (waited for, then its migrations checked or, with
 * MIGRATE_ON_START, applied), Redis (single or cluster), and
 * the bus on a dedicated subscriber connection; and the state folder when the node needs one. Opened first at start,
 * closed last at stop, and closed again by whatever fails here, so a failed start leaves no handle that
 * would keep the process alive.
 */
import { accessSync, constants, existsSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Bus } from '../bus/bus.js';
import { publishingToRemotes } from '../bus/remote-regions.js';
import type { BrokerConfig } from '../config.js';
import { runMigrations } from '../db/migrate.js';
import { checkMigrationsApplied } from '../db/migration-check.js';
import { createPool, type Pool } from '../db/pool.js';
import { PRIMARY_STATES, PrimaryFence, type PrimaryState } from '../db/primary-fence.js';
import { waitForDatabase } from '../db/wait.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import {
  createMainClient,
  createSubscriberClient,
  type RedisClient,
  type RedisTarget,
} from '../redis/clients.js';
import { logRedisErrors } from '../redis/connection-errors.js';
import { createPubSub, type PubSub } from '../redis/pubsub.js';

export interface Infrastructure {
  pool: Pool;
  /**
   * The pool of the lag-tolerant list reads with `ha.regions` on: a second pool on DATABASE_READ_URL (the
   * region's replica), or `pool` itself when it is unset (docs/multi-region.md).
   */
  readPool: Pool;
  /**
   * The node's main Redis client (a single Redis or a Redis Cluster, redis/clients.ts): no offline queue, so
   * a call never waits for Redis to come back.
   */
  redis: RedisClient;
  /**
   * The Redis of the shared counters (rate limits, connection cap, hello nonces): REDIS_COUNTERS_URL's, or
   * `redis` itself when it is unset.
   */
  counters: RedisClient;
  /** Pub/sub for everything the node listens to (bus channels, flag pushes), on one subscriber connection. */
  pubsub: PubSub;
  bus: Bus;
  close(): Promise<void>;
}

/** Brokers run no DDL unless asked to (a dev convenience): the owner migrates, once, before they start. */
async function prepareSchema(config: BrokerConfig): Promise<void> {
  if (config.migrateOnStart) await runMigrations(config.databaseUrl);
  else await checkMigrationsApplied(config.databaseUrl);
}

/** The primary's pool (fenced) and the read pool (the same one unless DATABASE_READ_URL differs), counted. */
function openPools(
  config: BrokerConfig,
  log: Logger,
  metrics: BrokerMetrics,
): { pool: Pool; readPool: Pool } {
  const fence = primaryFence(log, metrics);
  const onRoundTrip = (operation: string, kind: string) => metrics.dbRoundTrips.inc({ operation, kind });
  const pool = createPool(config.databaseUrl, {
    applicationName: `mesh-broker:${config.nodeId}`,
    fence,
    onRoundTrip,
  });
  const readPool =
    config.databaseReadUrl === config.databaseUrl
      ? pool
      : createPool(config.databaseReadUrl, {
          applicationName: `mesh-broker:${config.nodeId}:reads`,
          onRoundTrip,
        });
  return { pool, readPool };
}

export async function openInfrastructure(
  config: BrokerConfig,
  log: Logger,
  metrics: BrokerMetrics,
): Promise<Infrastructure> {
  // Checks that cannot get better by waiting come before the wait for Postgres.
  if (config.flagsProvider === 'unleash') ensureWritableFolder(config.stateDir, 'STATE_DIR');
  await waitForDatabase(config.databaseUrl, { waitMs: config.startupDbWaitMs, log });
  await prepareSchema(config);
  const { pool, readPool } = openPools(config, log, metrics);
  if (readPool !== pool) metrics.replicaLagFrom(() => replicaLag(readPool));
  // A stalled Redis (connected, not answering) must not hold a peer's request: every call gives up after
  // the timeout and its caller falls back (rate limits, nonces and the cap to this node's memory; a wake-up
  // is simply lost, which costs latency, never order).
  const redis = createMainClient(redisTarget(config), {
    keyPrefix: config.redisKeyPrefix,
    commandTimeoutMs: config.redisTimeoutMs,
  });
  logRedisErrors(redis, log, 'redis');
  redis.connect().catch((error) => log.warn({ err: error }, 'redis not reachable at start; retrying'));
  const counters =
    config.redisCountersUrl === config.redisUrl
      ? redis
      : createMainClient(
          { url: config.redisCountersUrl, tlsCa: config.redisTlsCa },
          { keyPrefix: config.redisKeyPrefix, commandTimeoutMs: config.redisTimeoutMs },
        );
  if (counters !== redis) {
    logRedisErrors(counters, log, 'redis (counters)');
    counters
      .connect()
      .catch((error) => log.warn({ err: error }, 'counters redis not reachable at start; retrying'));
  }
  const subscriber = createSubscriberClient(redis);
  logRedisErrors(subscriber, log, 'redis (subscriber)');
  const remotes = publishingToRemotes(createPubSub(redis, subscriber), {
    urls: config.redisRemoteUrls,
    tlsCa: config.redisTlsCa,
    commandTimeoutMs: config.redisTimeoutMs,
    onFailure: (remote) => metrics.busRemotePublishFailures.inc({ remote }),
    log,
  });
  const { pubsub } = remotes;
  const bus = new Bus({
    pubsub,
    prefix: config.redisKeyPrefix,
    nodeId: config.nodeId,
    keys: { current: config.busSecret, previous: config.busSecretPrevious },
    log,
    onPublishFailure: () => metrics.busPublishFailures.inc(),
    onRejected: (reason) => metrics.busRejected.inc({ reason }),
  });
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      // The subscriber first: nothing arrives for modules that are closing.
      subscriber.disconnect();
      await bus.close().catch(() => {});
      await pool.end().catch(() => {});
      if (readPool !== pool) await readPool.end().catch(() => {});
      remotes.close();
      if (counters !== redis) counters.disconnect();
      redis.disconnect();
    })();
    return closing;
  };
  try {
    await bus.start();
  } catch (error) {
    await close();
    throw error;
  }
  return { pool, readPool, redis, counters, pubsub, bus, close };
}

/** The fence of DATABASE_URL's pool, its verdicts logged and shown in mesh_broker_db_primary{state}. */
function primaryFence(log: Logger, metrics: BrokerMetrics): PrimaryFence {
  const show = (state: PrimaryState, timeline: number) => {
    for (const each of PRIMARY_STATES) metrics.dbPrimary.set({ state: each }, each === state ? 1 : 0);
    metrics.dbTimeline.set(timeline);
  };
  show('unknown', 0);
  return new PrimaryFence((state, timeline) => {
    show(state, timeline);
    if (state === 'primary') log.info({ timeline }, 'the database server is the primary of record');
    else
      log.warn(
        { state, timeline },
        `the database server is not the primary of record (${state}): writes answer unavailable`,
      );
  });
}

/** The node's Redis: a single one (REDIS_URL) or a cluster, with the credentials and the TLS CA. */
function redisTarget(config: BrokerConfig): RedisTarget {
  return {
    url: config.redisUrl,
    clusterNodes: config.redisClusterNodes,
    tlsCa: config.redisTlsCa,
    clusterAuth: config.redisClusterAuth,
  };
}

/**
 * Seconds the replica behind `readPool` is behind its primary: 0 when it has replayed all it received (an
 * idle primary sends nothing to replay, and `now() - pg_last_xact_replay_timestamp()` would grow anyway),
 * undefined when the server is not a replica.
 */
async function replicaLag(readPool: Pool): Promise<number | undefined> {
  const result = await readPool.query<{ lag: number | null }>(
    `SELECT CASE WHEN NOT pg_is_in_recovery() THEN NULL
                 WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
                 ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END AS lag`,
  );
  const lag = result.rows[0]?.lag;
  return lag === null || lag === undefined ? undefined : Number(lag);
}

/**
 * Creates `folder` if missing and checks it can be written, with the real reason when not. Node's
 * recursive mkdir reports a read-only file system as ENOENT (and loops on some virtual ones), so each
 * missing level is created on its own.
 */
export function ensureWritableFolder(folder: string, variable: string): void {
  const target = resolve(folder);
  const missing: string[] = [];
  for (let level = target; !existsSync(level); level = dirname(level)) {
    missing.unshift(level);
    if (dirname(level) === level) break;
  }
  try {
    for (const level of missing) mkdirSync(level);
    accessSync(target, constants.W_OK);
  } catch (error) {
    const reason = (error as Error).message;
    throw new Error(
      `${variable} ${target} is not a writable folder (${reason}); the Unleash provider keeps its backup of ` +
        `the flags there: point ${variable} at a writable folder (a volume in a container)`,
    );
  }
}
