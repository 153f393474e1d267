import { RateLimiterMemory, type RateLimiterRes, RateLimiterUnion } from 'rate-limiter-flexible';
import type { LimitKind, RateDecision, RateLimits, RateWindow } from './rate-limits.js';

/**
 * Buckets in this node's memory. The gap on 2+ nodes: a client spread over N nodes gets N × its quota.
 */
export class LocalRateLimits implements RateLimits {
  private readonly limiters: Record<LimitKind, RateLimiterUnion>;

  constructor(policies: Record<LimitKind, RateWindow[]>) {
    const build = (kind: LimitKind) =>
      new RateLimiterUnion(
        ...policies[kind].map(
          (window, i) =>
            new RateLimiterMemory({
              keyPrefix: `${kind}${i}`,
              points: window.points,
              duration: window.durationSec,
            }),
        ),
      );
    this.limiters = { send: build('send'), hook: build('hook') };
  }

  async consume(kind: LimitKind, key: string): Promise<RateDecision> {
    try {
      await this.limiters[kind].consume(key);
      return { allowed: true, retryAfterMs: 0 };
    } catch (rejection) {
      if (rejection instanceof Error) throw rejection;
      const refused = Object.values(rejection as Record<string, RateLimiterRes>);
      return { allowed: false, retryAfterMs: Math.max(0, ...refused.map((r) => r.msBeforeNext)) };
    }
  }
}
