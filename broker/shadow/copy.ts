/**
 * The Redis a row's shadow copy lives in (docs/flags.md § Shadow): the node's counters Redis with the keys
 * under `shadow:` after the node's prefix, so nothing a serving implementation reads is ever written. Its
 * own connection and its own guard: a shadow's timeouts never pause the serving rows' use of Redis.
 */
import { Cluster } from 'ioredis';
import type { RedisClient } from '../redis/clients.js';
import { RedisGuard } from '../redis/guard.js';

export const SHADOW_KEY_PREFIX = 'shadow:';

export interface ShadowRedis {
  client: RedisClient;
  guard: RedisGuard;
  close(): Promise<void>;
}

export async function openShadowRedis(main: RedisClient): Promise<ShadowRedis> {
  const keyPrefix = `${main.options.keyPrefix ?? ''}${SHADOW_KEY_PREFIX}`;
  const client =
    main instanceof Cluster ? main.duplicate(undefined, { keyPrefix }) : main.duplicate({ keyPrefix });
  await client.connect();
  return {
    client,
    guard: new RedisGuard(client),
    close: async () => {
      client.disconnect();
    },
  };
}
