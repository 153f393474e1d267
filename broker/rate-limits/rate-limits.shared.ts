import { RateLimiterRedis, type RateLimiterUnion } from 'rate-limiter-flexible';
import type { Logger } from '../log.js';
import type { RedisClient } from '../redis/clients.js';
import { RedisWithFallback } from '../redis/fallback.js';
import type { RedisGuard } from '../redis/guard.js';
import type { LimitKind, RateDecision, RateLimits, RateWindow } from './rate-limits.js';
import { consumeFrom, limiterUnions } from './union.js';

/**
 * One bucket per key in Redis (flag `ha.rate-limits`): rate-limiter-flexible's Redis limiter updates a
 * bucket atomically, so every node takes from the same quota. With Redis unreachable it falls back to
 * this node's own buckets (per-node limits, so up to N × quota for N nodes), logs the first fallback
 * and counts each one (`mesh_broker_redis_fallback_total{row="rate-limits"}`).
 */
export class SharedRateLimits implements RateLimits {
  private readonly unions: Record<LimitKind, RateLimiterUnion>;
  private readonly redisFirst: RedisWithFallback;

  constructor(
    redis: RedisClient,
    guard: RedisGuard,
    policies: Record<LimitKind, RateWindow[]>,
    private readonly fallback: RateLimits,
    onFallback: () => void,
    log: Logger,
  ) {
    this.redisFirst = new RedisWithFallback({
      guard,
      onFallback,
      log,
      fallingBackMessage: 'rate limits: Redis unavailable, falling back to per-node buckets',
      recoveredMessage: 'rate limits: Redis is back, shared buckets again',
    });
    this.unions = limiterUnions(
      policies,
      (options) => new RateLimiterRedis({ ...options, storeClient: redis }),
    );
  }

  async activate(): Promise<void> {}

  async deactivate(): Promise<void> {}

  async close(): Promise<void> {}

  consume(kind: LimitKind, key: string): Promise<RateDecision> {
    return this.redisFirst.run(
      () => consumeFrom(this.unions[kind], key),
      () => this.fallback.consume(kind, key),
    );
  }
}
