/**
 * The "refresh now" push: `workbench flags set` publishes on the environment's channel after changing
 * the provider; every node subscribed re-reads its provider at once. A hint only: the provider's own
 * poll still brings a node that missed it up to date.
 *
 * flags/ owns the channel and the two ends' shapes; it depends on nothing of broker/. The Redis side is
 * handed in by the root: a node's pub/sub (broker/redis/pubsub.ts) is both a publisher and a subscriber,
 * and broker/flag-refresh.ts makes a publisher of a plain Redis client and the CLI's one-shot push. On a
 * Redis Cluster the channel is a sharded one, which is why publishing goes through those and not through
 * a client's PUBLISH.
 */

/** Publishes `text` on `channel` (full name); resolves to how many subscribers got it. */
export interface RefreshPublisher {
  publish(channel: string, text: string): Promise<number>;
}

/** A pub/sub connection that tells when its subscriptions were (re)made, whatever was lost meanwhile. */
export interface RefreshSubscriber {
  subscribe(channel: string): Promise<void>;
  onMessage(listener: (channel: string, text: string) => void): void;
  onResubscribed(listener: () => void): void;
}

export function refreshChannel(redisKeyPrefix: string, environment: string): string {
  return `${redisKeyPrefix}flags:refresh:${environment}`;
}

export async function publishRefresh(
  publisher: RefreshPublisher,
  redisKeyPrefix: string,
  environment: string,
  reason: object,
): Promise<number> {
  return publisher.publish(refreshChannel(redisKeyPrefix, environment), JSON.stringify(reason));
}

/** Subscribes the node's pub/sub; calls `onRefresh` for every push, and again after a reconnect. */
export async function subscribeRefresh(
  subscriber: RefreshSubscriber,
  redisKeyPrefix: string,
  environment: string,
  onRefresh: () => void,
): Promise<void> {
  const channel = refreshChannel(redisKeyPrefix, environment);
  subscriber.onMessage((received) => {
    if (received === channel) onRefresh();
  });
  // A push sent while disconnected is lost: read the provider again whenever the connection returns.
  subscriber.onResubscribed(() => onRefresh());
  await subscriber.subscribe(channel);
}
