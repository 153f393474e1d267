/**
 * The Redis side of flags/'s "refresh now" push (flags/refresh-bus.ts), which flags/ cannot import:
 * a publisher made of a Redis client (PUBLISH, or SPUBLISH on a cluster, as the nodes subscribe), and the
 * CLI's push over a connection of its own. A node's subscriber is its pub/sub (broker/redis/pubsub.ts).
 */
import { publishRefresh, type RefreshPublisher } from '../flags/refresh-bus.js';
import { createOneShotClient, type RedisClient } from './redis/clients.js';
import type { RedisClusterNode } from './redis/cluster-nodes.js';
import { publishOn } from './redis/pubsub.js';

/** Publishes through `redis`, which may be a single Redis or a cluster client. */
export function refreshPublisher(redis: RedisClient): RefreshPublisher {
  return { publish: (channel, text) => publishOn(redis, channel, text) };
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
    return await publishRefresh(refreshPublisher(redis), push.keyPrefix, environment, reason);
  } catch {
    return undefined;
  } finally {
    redis.disconnect();
  }
}
