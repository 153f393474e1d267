/**
 * Pub/sub over either kind of Redis, for the bus and the flag push. A single Redis uses classic
 * SUBSCRIBE/PUBLISH. A Redis Cluster uses sharded pub/sub (Redis 7: SSUBSCRIBE/SPUBLISH): a channel lives on
 * the master that owns its slot, so a publish touches one shard instead of being broadcast over the whole
 * cluster bus, and the subscriber connections are one per master (ioredis `shardedSubscribers`).
 * Channel names are always given in full (with the key prefix).
 */
import { Cluster } from 'ioredis';
import type { RedisClient } from './clients.js';

export interface PubSub {
  /** Publishes on `channel` (full name); resolves to the number of connections that received it. */
  publish(channel: string, text: string): Promise<number>;
  subscribe(channel: string): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
  onMessage(listener: (channel: string, text: string) => void): void;
  /**
   * `listener` runs whenever the subscriptions are (re)established after a connection was lost, also the
   * first time: whatever was published meanwhile is lost (pub/sub is at-most-once).
   */
  onResubscribed(listener: () => void): void;
}

/**
 * One publish: PUBLISH on a single Redis, SPUBLISH on a cluster (where the subscribers use SSUBSCRIBE; a
 * classic PUBLISH would never reach them). For publishers without a subscriber of their own (the CLI's
 * flag push).
 */
export async function publishOn(publisher: RedisClient, channel: string, text: string): Promise<number> {
  // PUBLISH names no key, so ioredis adds no key prefix: the channel goes out as given.
  if (!(publisher instanceof Cluster)) return publisher.publish(channel, text);
  // SPUBLISH's channel is a key to ioredis (it routes the command by the channel's slot), so the client's
  // key prefix is added to it like to any key: hand over the name without it.
  const prefix = publisher.options.keyPrefix ?? '';
  if (!channel.startsWith(prefix))
    throw new Error(`channel "${channel}" lacks the publisher's key prefix "${prefix}"`);
  // Typed unknown by ioredis; Redis answers with the number of receivers, as for PUBLISH.
  return Number(await publisher.spublish(channel.slice(prefix.length), text));
}

/** Classic pub/sub on a single Redis, sharded pub/sub on a cluster. */
export function createPubSub(publisher: RedisClient, subscriber: RedisClient): PubSub {
  return subscriber instanceof Cluster
    ? new ShardedPubSub(publisher, subscriber)
    : new ClassicPubSub(publisher, subscriber);
}

class ClassicPubSub implements PubSub {
  constructor(
    private readonly publisher: RedisClient,
    private readonly subscriber: RedisClient,
  ) {}

  publish(channel: string, text: string): Promise<number> {
    return publishOn(this.publisher, channel, text);
  }

  async subscribe(channel: string): Promise<void> {
    await this.subscriber.subscribe(channel);
  }

  async unsubscribe(channel: string): Promise<void> {
    await this.subscriber.unsubscribe(channel);
  }

  onMessage(listener: (channel: string, text: string) => void): void {
    this.subscriber.on('message', listener);
  }

  onResubscribed(listener: () => void): void {
    // ioredis resubscribes before "ready".
    this.subscriber.on('ready', listener);
  }
}

class ShardedPubSub implements PubSub {
  constructor(
    private readonly publisher: RedisClient,
    private readonly subscriber: Cluster,
  ) {}

  publish(channel: string, text: string): Promise<number> {
    return publishOn(this.publisher, channel, text);
  }

  async subscribe(channel: string): Promise<void> {
    await this.subscriber.ssubscribe(channel);
  }

  async unsubscribe(channel: string): Promise<void> {
    await this.subscriber.sunsubscribe(channel);
  }

  onMessage(listener: (channel: string, text: string) => void): void {
    this.subscriber.on('smessage', listener);
  }

  onResubscribed(listener: () => void): void {
    // Emitted after the per-master subscriber connections were (re)made for the current slot map and the
    // channels resubscribed on them: at start, and after a failover moved slots to a promoted replica.
    this.subscriber.on('subscribersReady', listener);
  }
}
