/**
 * The "refresh now" push: `workbench flags set` publishes on the environment's channel after changing
 * the provider; every node subscribed re-reads its provider at once. A hint only: the provider's own
 * poll still brings a node that missed it up to date. On a Redis Cluster the channel is a sharded one
 * (broker/redis/pubsub.ts), so the publisher must be a cluster client too (REDIS_CLUSTER_NODES).
 */

import { createOneShotClient, type RedisClient } from '../broker/redis/clients.js';
import type { RedisClusterNode } from '../broker/redis/cluster-nodes.js';
import { type PubSub, publishOn } from '../broker/redis/pubsub.js';

export function refreshChannel(redisKeyPrefix: string, environment: string): string {
  return `${redisKeyPrefix}flags:refresh:${environment}`;
}

export async function publishRefresh(
  redis: RedisClient,
  redisKeyPrefix: string,
  environment: string,
  reason: object,
) {
  return publishOn(redis, refreshChannel(redisKeyPrefix, environment), JSON.stringify(reason));
}

/**
 * Publishes one push over a connection of its own (a CLI command has none open): how many nodes got it,
 * or undefined when Redis did not answer (the nodes' poll is the backstop).
 */
export async function pushRefreshOnce(
  push: { redisUrl: string; keyPrefix: string; clusterNodes?: RedisClusterNode[] | undefined },
  environment: string,
  reason: object,
): Promise<number | undefined> {
  const redis = createOneShotClient({ url: push.redisUrl, clusterNodes: push.clusterNodes });
  redis.on('error', () => {});
  try {
    await redis.connect();
    return await publishRefresh(redis, push.keyPrefix, environment, reason);
  } catch {
    return undefined;
  } finally {
    redis.disconnect();
  }
}

/** Subscribes the node's pub/sub; calls `onRefresh` for every push, and again after a reconnect. */
export async function subscribeRefresh(
  pubsub: PubSub,
  redisKeyPrefix: string,
  environment: string,
  onRefresh: () => void,
): Promise<void> {
  const channel = refreshChannel(redisKeyPrefix, environment);
  pubsub.onMessage((received) => {
    if (received === channel) onRefresh();
  });
  // A push sent while disconnected is lost: read the provider again whenever the connection returns.
  pubsub.onResubscribed(() => onRefresh());
  await pubsub.subscribe(channel);
}
