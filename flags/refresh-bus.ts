/**
 * The "refresh now" push: `workbench flags set` publishes on the environment's channel after changing
 * the provider; every node subscribed re-reads its provider at once. A hint only: the provider's own
 * poll still brings a node that missed it up to date.
 */
import { Redis } from 'ioredis';

export function refreshChannel(redisKeyPrefix: string, environment: string): string {
  return `${redisKeyPrefix}flags:refresh:${environment}`;
}

export async function publishRefresh(
  redis: Redis,
  redisKeyPrefix: string,
  environment: string,
  reason: object,
) {
  return redis.publish(refreshChannel(redisKeyPrefix, environment), JSON.stringify(reason));
}

/**
 * Publishes one push over a connection of its own (a CLI command has none open): how many nodes got it,
 * or undefined when Redis did not answer (the nodes' poll is the backstop).
 */
export async function pushRefreshOnce(
  push: { redisUrl: string; keyPrefix: string },
  environment: string,
  reason: object,
): Promise<number | undefined> {
  const redis = new Redis(push.redisUrl, {
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
  });
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

/** Subscribes a dedicated connection; calls `onRefresh` for every push, and again after a reconnect. */
export async function subscribeRefresh(
  subscriber: Redis,
  redisKeyPrefix: string,
  environment: string,
  onRefresh: () => void,
): Promise<void> {
  const channel = refreshChannel(redisKeyPrefix, environment);
  subscriber.on('message', (received: string) => {
    if (received === channel) onRefresh();
  });
  // A push sent while disconnected is lost: read the provider again whenever the connection returns.
  subscriber.on('ready', () => onRefresh());
  await subscriber.subscribe(channel);
}
