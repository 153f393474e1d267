/**
 * The "refresh now" push: `workbench flags set` publishes on the environment's channel after changing
 * the provider; every node subscribed re-reads its provider at once. A hint only: the provider's own
 * poll still brings a node that missed it up to date.
 */
import type { Redis } from 'ioredis';

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
