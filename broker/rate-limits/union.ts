import { type RateLimiterAbstract, type RateLimiterRes, RateLimiterUnion } from 'rate-limiter-flexible';
import type { LimitKind, RateDecision, RateWindow } from './rate-limits.js';

/** One rate-limiter-flexible union per kind, all windows of a kind from the same store. */
export function limiterUnions(
  policies: Record<LimitKind, RateWindow[]>,
  makeLimiter: (options: { keyPrefix: string; points: number; duration: number }) => RateLimiterAbstract,
): Record<LimitKind, RateLimiterUnion> {
  const build = (kind: LimitKind) =>
    new RateLimiterUnion(
      ...policies[kind].map((window, i) =>
        makeLimiter({ keyPrefix: `rl:${kind}${i}`, points: window.points, duration: window.durationSec }),
      ),
    );
  return { send: build('send'), hook: build('hook') };
}

/** Takes a point from every window; a store failure is thrown as an Error (not a refusal). */
export async function consumeFrom(union: RateLimiterUnion, key: string): Promise<RateDecision> {
  try {
    await union.consume(key);
    return { allowed: true, retryAfterMs: 0 };
  } catch (rejection) {
    if (rejection instanceof Error) throw rejection;
    const outcomes = Object.values(rejection as Record<string, RateLimiterRes | Error>);
    // A union reports a store failure as {prefix: Error}, not as a refusal.
    const failure = outcomes.find((outcome): outcome is Error => outcome instanceof Error);
    if (failure) throw failure;
    const refused = outcomes as RateLimiterRes[];
    return { allowed: false, retryAfterMs: Math.max(0, ...refused.map((r) => r.msBeforeNext)) };
  }
}
