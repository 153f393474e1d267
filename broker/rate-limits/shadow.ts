/**
 * Shadow comparator of `ha.rate-limits` (docs/rate-limits.md § Shadow): shared buckets on a shadow copy
 * (broker/shadow/copy.ts) take the same points as the local buckets, and the two decisions (`allowed`)
 * are compared. A copy whose Redis does not answer is an error, never an agreement.
 */
import type { Logger } from '../log.js';
import type { RedisClient } from '../redis/clients.js';
import { openShadowRedis, type ShadowRedis } from '../shadow/copy.js';
import type { RowShadow, ShadowSample } from '../shadow/shadow.js';
import type { LimitKind, RateDecision, RateLimits, RateWindow } from './rate-limits.js';
import { SharedRateLimits } from './rate-limits.shared.js';

/** What the copy answers when its Redis is not usable: an error for the comparison. */
const unavailable: RateLimits = {
  activate: async () => {},
  deactivate: async () => {},
  close: async () => {},
  consume: async () => {
    throw new Error('rate-limits shadow copy: Redis unavailable');
  },
};

export function rateLimitsShadow(
  redisMain: RedisClient,
  policies: Record<LimitKind, RateWindow[]>,
  log: Logger,
): RowShadow {
  let redis: ShadowRedis | undefined;
  let copy: SharedRateLimits | undefined;
  return {
    observes: ['consume'],
    async start() {
      redis = await openShadowRedis(redisMain);
      copy = new SharedRateLimits(redis.client, redis.guard, policies, unavailable, () => {}, log);
    },
    async stop() {
      await redis?.close();
      copy = undefined;
      redis = undefined;
    },
    async compare(_method, args, local): Promise<ShadowSample | undefined> {
      if (!copy) return undefined;
      const [kind, key] = args as [LimitKind, string];
      const shared = await copy.consume(kind, key);
      return { subject: `consume ${kind}`, local: (local as RateDecision).allowed, shared: shared.allowed };
    },
  };
}
