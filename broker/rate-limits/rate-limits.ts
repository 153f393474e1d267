import type { Lifecycle } from '../rows/lifecycle.js';

/**
 * Rate limits: send per member, hook per session (docs/design.md §2, row "send / hook / token rate limits").
 *
 * Contract: `consume` takes one point from every window of the kind's policy for `key`; it is allowed
 * only when every window still had a point. Implementations differ in where the buckets live (this
 * node's memory, or Redis for one bucket per key cluster-wide); both use rate-limiter-flexible, so the
 * windows behave the same.
 */
export type LimitKind = 'send' | 'hook';

export interface RateDecision {
  allowed: boolean;
  /** When refused: how long until a point is back. */
  retryAfterMs: number;
}

export interface RateLimits extends Lifecycle {
  consume(kind: LimitKind, key: string): Promise<RateDecision>;
}

/** `points` per `durationSec`, fixed window. */
export interface RateWindow {
  points: number;
  durationSec: number;
}

export interface RateLimitConfig {
  sendRatePerMin: number;
  sendBurst: number;
  hookRatePerMin: number;
}

/**
 * The windows of each kind. "Burst B, R per minute" is two windows that must both have a point: B per
 * the time R/min takes to refill B (10 per 10 s for the defaults), and R per minute.
 */
export function ratePolicies(config: RateLimitConfig): Record<LimitKind, RateWindow[]> {
  const burstWindowSec = Math.max(1, Math.ceil((config.sendBurst * 60) / config.sendRatePerMin));
  return {
    send: [
      { points: config.sendBurst, durationSec: burstWindowSec },
      { points: config.sendRatePerMin, durationSec: 60 },
    ],
    hook: [{ points: config.hookRatePerMin, durationSec: 60 }],
  };
}
