/**
 * Fan-out latency across nodes: a bus payload carries `publishedAt` (the origin's Date.now()), the
 * receiver measures when it delivered. Wall clocks of two hosts differ a little; a negative result
 * (receiver behind) is clamped to 0 rather than dropped, so every delivery is counted.
 */
export function secondsSince(publishedAt: number, now = Date.now()): number {
  return Math.max(0, now - publishedAt) / 1000;
}
