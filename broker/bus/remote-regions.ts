/**
 * The bus across regions (docs/multi-region.md § The bus across regions): a node subscribes to its own
 * region's Redis only, and publishes each bus message there and to every other region's Redis
 * (REDIS_REMOTE_URLS), so every node of every region hears it once, from its local Redis.
 *
 * A remote never holds or fails the local publish: its copy is sent without being awaited, each command
 * gives up after REDIS_TIMEOUT_MS, and at most MAX_IN_FLIGHT copies wait per remote (one more is dropped):
 * a slow or cut link costs the other region those messages (the bus is a hint; durable state is on the
 * primary), counted in `mesh_broker_bus_remote_publish_failures_total{remote}`.
 */
import type { Logger } from '../log.js';
import { createMainClient, type RedisClient } from '../redis/clients.js';
import { type PubSub, publishOn } from '../redis/pubsub.js';

/** Copies of bus messages one remote may have unanswered before new ones are dropped. */
export const MAX_IN_FLIGHT = 1000;

export interface RemoteRegionsOptions {
  urls: string[];
  /** The CA of the remotes' certificates when they are `rediss://` (REDIS_TLS_CA_FILE). */
  tlsCa?: string | undefined;
  commandTimeoutMs: number;
  onFailure: (remote: string) => void;
  log: Logger;
}

interface Remote {
  /** host:port, as the metric labels it (never the URL: it may hold a password). */
  name: string;
  client: RedisClient;
  inFlight: number;
}

export interface RemotePublishing {
  pubsub: PubSub;
  close(): void;
}

/** `local` with every publish also sent to each remote region's Redis. */
export function publishingToRemotes(local: PubSub, options: RemoteRegionsOptions): RemotePublishing {
  const remotes: Remote[] = options.urls.map((url) => {
    const parsed = new URL(url);
    const client = createMainClient(
      { url, tlsCa: options.tlsCa },
      { keyPrefix: '', commandTimeoutMs: options.commandTimeoutMs },
    );
    client.on('error', (error) =>
      options.log.debug({ err: error, remote: parsed.host }, 'remote redis error'),
    );
    client.connect().catch((error) => {
      options.log.warn(
        { err: error, remote: parsed.host },
        'remote region redis not reachable at start; retrying',
      );
    });
    return { name: parsed.host, client, inFlight: 0 };
  });
  const copy = (remote: Remote, channel: string, text: string) => {
    if (remote.inFlight >= MAX_IN_FLIGHT || remote.client.status !== 'ready') {
      options.onFailure(remote.name);
      return;
    }
    remote.inFlight++;
    publishOn(remote.client, channel, text)
      .catch(() => options.onFailure(remote.name))
      .finally(() => {
        remote.inFlight--;
      });
  };
  const pubsub: PubSub = {
    publish(channel, text) {
      for (const remote of remotes) copy(remote, channel, text);
      return local.publish(channel, text);
    },
    subscribe: (channel) => local.subscribe(channel),
    unsubscribe: (channel) => local.unsubscribe(channel),
    onMessage: (listener) => local.onMessage(listener),
    onResubscribed: (listener) => local.onResubscribed(listener),
  };
  return {
    pubsub,
    close: () => {
      for (const remote of remotes) remote.client.disconnect();
    },
  };
}
