/**
 * The one place a node's Redis clients are made: a single Redis (REDIS_URL) or, with REDIS_CLUSTER_NODES set,
 * a Redis Cluster (docs/redis-cluster.md). Every module takes its client from here and codes against
 * `RedisClient`, the commands both kinds share; what differs (pub/sub) is in redis/pubsub.ts.
 */
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { RedisClusterNode } from './cluster-nodes.js';
import { GuardedConnector } from './guarded-connector.js';

/** A single Redis or a Redis Cluster: the same commands; a cluster needs a script's keys in one slot. */
export type RedisClient = Redis | Cluster;

/** Where Redis is: `clusterNodes` (the cluster's seed nodes) wins over `url` when set. */
export interface RedisTarget {
  url: string;
  clusterNodes?: RedisClusterNode[] | undefined;
  /** The CA of a `rediss://` (or TLS cluster) server's certificate, PEM; unset: the system's CAs. */
  tlsCa?: string | undefined;
  /** A Redis Cluster's ACL user and password, and whether its nodes speak TLS (a URL carries its own). */
  clusterAuth?: { username?: string | undefined; password?: string | undefined; tls: boolean } | undefined;
}

/**
 * The connection options that prove the client to Redis and check Redis's certificate: from the URL
 * (user and password in it, TLS for `rediss:`) or, on a cluster, from `clusterAuth`. TLS always verifies
 * the server (against `tlsCa` when given).
 */
export function connectionSecurity(target: RedisTarget): RedisOptions {
  const tls = { ...(target.tlsCa === undefined ? {} : { ca: target.tlsCa }), rejectUnauthorized: true };
  // Every socket keeps an error listener (redis/guarded-connector.ts): a TLS failure can error twice.
  const secure = { tls, Connector: GuardedConnector };
  if (target.clusterNodes) {
    const auth = target.clusterAuth;
    return {
      ...(auth?.username === undefined ? {} : { username: auth.username }),
      ...(auth?.password === undefined ? {} : { password: auth.password }),
      ...(auth?.tls ? secure : {}),
    };
  }
  return new URL(target.url).protocol === 'rediss:' ? secure : {};
}

export interface MainClientOptions {
  keyPrefix: string;
  /** Every command gives up after this (its caller falls back); undefined: no bound. */
  commandTimeoutMs?: number | undefined;
}

/** Reconnects back off to at most 2 s, on a single Redis and on a cluster alike. */
const retry = (attempt: number) => Math.min(attempt * 200, 2000);

/**
 * The node's main client: lazily connected (call `connect()`), no offline queue (a call never waits for
 * Redis to come back), one retry, and automatic pipelining (commands of one tick leave in one write; on a
 * cluster, one write per master). On a cluster, a command to a slot that has no master (CLUSTERDOWN, or
 * its master's connection closed) fails at once instead of being retried for up to 16 × 100 ms, so its
 * caller falls back as it does when a single Redis is down; a slot's new master (after a failover) is
 * learnt from MOVED or the slot map, re-read every second.
 */
export function createMainClient(target: RedisTarget, options: MainClientOptions): RedisClient {
  if (target.clusterNodes) {
    return new Cluster(target.clusterNodes, {
      keyPrefix: options.keyPrefix,
      lazyConnect: true,
      enableOfflineQueue: false,
      enableAutoPipelining: true,
      clusterRetryStrategy: retry,
      retryDelayOnClusterDown: 0,
      retryDelayOnFailover: 0,
      slotsRefreshInterval: 1000,
      redisOptions: {
        ...connectionSecurity(target),
        maxRetriesPerRequest: 1,
        commandTimeout: options.commandTimeoutMs,
      },
    });
  }
  return new Redis(target.url, {
    ...connectionSecurity(target),
    keyPrefix: options.keyPrefix,
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    commandTimeout: options.commandTimeoutMs,
    enableAutoPipelining: true,
    retryStrategy: retry,
  });
}

/**
 * A connection for listening only (bus channels, flag pushes), connecting at once and queueing its
 * subscribes until connected; ioredis resubscribes after a reconnect. No key prefix: channel names are
 * written out in full (redis/pubsub.ts). On a cluster it opens one subscriber connection per master, for
 * sharded pub/sub.
 */
export function createSubscriberClient(main: RedisClient): RedisClient {
  if (main instanceof Cluster) {
    return main.duplicate(undefined, {
      keyPrefix: '',
      lazyConnect: false,
      enableOfflineQueue: true,
      shardedSubscribers: true,
      // A subscribe waits for its slot's master instead (ioredis's defaults).
      retryDelayOnClusterDown: 100,
      retryDelayOnFailover: 100,
      redisOptions: { ...main.options.redisOptions, commandTimeout: undefined },
    });
  }
  return main.duplicate({
    keyPrefix: '',
    enableOfflineQueue: true,
    lazyConnect: false,
    commandTimeout: undefined,
  });
}

/** A short-lived client for one command (the CLI's flag push): no retries, no queue. */
export function createOneShotClient(target: RedisTarget): RedisClient {
  if (target.clusterNodes) {
    return new Cluster(target.clusterNodes, {
      lazyConnect: true,
      enableOfflineQueue: false,
      // One round of attempts: a CLI command reports "not pushed" rather than wait.
      clusterRetryStrategy: () => null,
      redisOptions: { ...connectionSecurity(target), maxRetriesPerRequest: 1 },
    });
  }
  return new Redis(target.url, {
    ...connectionSecurity(target),
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
  });
}
