import { RateLimiterRedis, type RateLimiterUnion } from 'rate-limiter-flexible';
import type { Logger } from '../log.js';
import type { RedisClient } from '../redis/clients.js';
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
  private fallingBack = false;

  constructor(
    redis: RedisClient,
    private readonly guard: RedisGuard,
    policies: Record<LimitKind, RateWindow[]>,
    private readonly fallback: RateLimits,
    private readonly onFallback: () => void,
    private readonly log: Logger,
  ) {
    this.unions = limiterUnions(
      policies,
      (options) => new RateLimiterRedis({ ...options, storeClient: redis }),
    );
  }

  async activate(): Promise<void> {}

  async deactivate(): Promise<void> {}

  async close(): Promise<void> {}

  async consume(kind: LimitKind, key: string): Promise<RateDecision> {
    if (this.guard.usable()) {
      try {
        const decision = await consumeFrom(this.unions[kind], key);
        if (this.fallingBack) this.log.info('rate limits: Redis is back, shared buckets again');
        this.fallingBack = false;
        return decision;
      } catch (error) {
        this.guard.failed(error);
        this.noteFallback(error as Error);
      }
    } else {
      this.noteFallback(new Error('redis unavailable or stalled'));
    }
    return this.fallback.consume(kind, key);
  }

  private noteFallback(error: Error): void {
    this.onFallback();
    if (!this.fallingBack)
      this.log.warn({ err: error }, 'rate limits: Redis unavailable, falling back to per-node buckets');
    this.fallingBack = true;
  }
}
