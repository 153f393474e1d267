/**
 * A node's connections to the outside: Postgres (migrated first), Redis, and the bus on a dedicated
 * subscriber connection. Opened first at start, closed last at stop.
 */
import { Redis } from 'ioredis';
import { Bus } from '../bus/bus.js';
import type { BrokerConfig } from '../config.js';
import { runMigrations } from '../db/migrate.js';
import { createPool, type Pool } from '../db/pool.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';

export interface Infrastructure {
  pool: Pool;
  /** The node's main Redis client: no offline queue, so a call never waits for Redis to come back. */
  redis: Redis;
  /** One subscriber connection for everything the node listens to (bus channels, flag pushes). */
  subscriber: Redis;
  bus: Bus;
  close(): Promise<void>;
}

export async function openInfrastructure(
  config: BrokerConfig,
  log: Logger,
  metrics: BrokerMetrics,
): Promise<Infrastructure> {
  await runMigrations(config.databaseUrl);
  const pool = createPool(config.databaseUrl, { applicationName: `mesh-broker:${config.nodeId}` });
  const redis = new Redis(config.redisUrl, {
    keyPrefix: config.redisKeyPrefix,
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    // A stalled Redis (connected, not answering) must not hold a peer's request: every call gives up after
    // this and its caller falls back (rate limits, nonces and the cap to this node's memory; a wake-up is
    // simply lost, which costs latency, never order).
    commandTimeout: config.redisTimeoutMs,
    // Commands issued in the same tick (a commit's wake-ups, many rate-limit checks) leave in one write.
    enableAutoPipelining: true,
    retryStrategy: (attempt) => Math.min(attempt * 200, 2000),
  });
  redis.on('error', (error) => log.debug({ err: error }, 'redis error'));
  redis.connect().catch((error) => log.warn({ err: error }, 'redis not reachable at start; retrying'));
  const subscriber = redis.duplicate({
    keyPrefix: '',
    enableOfflineQueue: true,
    lazyConnect: false,
    commandTimeout: undefined,
  });
  subscriber.on('error', (error) => log.debug({ err: error }, 'redis (subscriber) error'));
  const bus = new Bus({
    publisher: redis,
    subscriber,
    prefix: config.redisKeyPrefix,
    nodeId: config.nodeId,
    log,
    onPublishFailure: () => metrics.busPublishFailures.inc(),
  });
  await bus.start();
  return {
    pool,
    redis,
    subscriber,
    bus,
    close: async () => {
      await bus.close();
      await pool.end().catch(() => {});
      redis.disconnect();
    },
  };
}
