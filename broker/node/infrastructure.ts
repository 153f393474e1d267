/**
 * A node's connections to the outside: Postgres (waited for, then migrated), Redis (single or cluster), and
 * the bus on a dedicated subscriber connection; and the state folder when the node needs one. Opened first at start,
 * closed last at stop, and closed again by whatever fails here, so a failed start leaves no handle that
 * would keep the process alive.
 */
import { accessSync, constants, existsSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Bus } from '../bus/bus.js';
import type { BrokerConfig } from '../config.js';
import { runMigrations } from '../db/migrate.js';
import { createPool, type Pool } from '../db/pool.js';
import { waitForDatabase } from '../db/wait.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import { createMainClient, createSubscriberClient, type RedisClient } from '../redis/clients.js';
import { createPubSub, type PubSub } from '../redis/pubsub.js';

export interface Infrastructure {
  pool: Pool;
  /**
   * The node's main Redis client (a single Redis or a Redis Cluster, redis/clients.ts): no offline queue, so
   * a call never waits for Redis to come back.
   */
  redis: RedisClient;
  /** Pub/sub for everything the node listens to (bus channels, flag pushes), on one subscriber connection. */
  pubsub: PubSub;
  bus: Bus;
  close(): Promise<void>;
}

export async function openInfrastructure(
  config: BrokerConfig,
  log: Logger,
  metrics: BrokerMetrics,
): Promise<Infrastructure> {
  // Checks that cannot get better by waiting come before the wait for Postgres.
  if (config.flagsProvider === 'unleash') ensureWritableFolder(config.stateDir, 'STATE_DIR');
  await waitForDatabase(config.databaseUrl, { waitMs: config.startupDbWaitMs, log });
  await runMigrations(config.databaseUrl);
  const pool = createPool(config.databaseUrl, { applicationName: `mesh-broker:${config.nodeId}` });
  // A stalled Redis (connected, not answering) must not hold a peer's request: every call gives up after
  // the timeout and its caller falls back (rate limits, nonces and the cap to this node's memory; a wake-up
  // is simply lost, which costs latency, never order).
  const target = { url: config.redisUrl, clusterNodes: config.redisClusterNodes };
  const redis = createMainClient(target, {
    keyPrefix: config.redisKeyPrefix,
    commandTimeoutMs: config.redisTimeoutMs,
  });
  redis.on('error', (error) => log.debug({ err: error }, 'redis error'));
  redis.connect().catch((error) => log.warn({ err: error }, 'redis not reachable at start; retrying'));
  const subscriber = createSubscriberClient(redis);
  subscriber.on('error', (error) => log.debug({ err: error }, 'redis (subscriber) error'));
  const pubsub = createPubSub(redis, subscriber);
  const bus = new Bus({
    pubsub,
    prefix: config.redisKeyPrefix,
    nodeId: config.nodeId,
    log,
    onPublishFailure: () => metrics.busPublishFailures.inc(),
  });
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      // The subscriber first: nothing arrives for modules that are closing.
      subscriber.disconnect();
      await bus.close().catch(() => {});
      await pool.end().catch(() => {});
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
  return { pool, redis, pubsub, bus, close };
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
