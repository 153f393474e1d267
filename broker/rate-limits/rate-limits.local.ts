import { RateLimiterMemory, type RateLimiterUnion } from 'rate-limiter-flexible';
import type { LimitKind, RateDecision, RateLimits, RateWindow } from './rate-limits.js';
import { consumeFrom, limiterUnions } from './union.js';

/**
 * Buckets in this node's memory. The gap on 2+ nodes: a client spread over N nodes gets N × its quota.
 */
export class LocalRateLimits implements RateLimits {
  private readonly unions: Record<LimitKind, RateLimiterUnion>;

  constructor(policies: Record<LimitKind, RateWindow[]>) {
    this.unions = limiterUnions(policies, (options) => new RateLimiterMemory(options));
  }

  async activate(): Promise<void> {}

  async deactivate(): Promise<void> {}

  async close(): Promise<void> {}

  consume(kind: LimitKind, key: string): Promise<RateDecision> {
    return consumeFrom(this.unions[kind], key);
  }
}
