/**
 * The SDK's one reconnect policy: exponential backoff with full jitter (each wait is uniform in
 * [0, min(maxDelayMs, initialDelayMs × 2^attempt)]), so a thousand peers cut at once do not come back in
 * step, and a cap on consecutive failed attempts after which the client suspends instead of trying for
 * ever.
 */
export interface RetryPolicy {
  /** The first wait's upper bound (default 100 ms). */
  initialDelayMs?: number;
  /** No wait is longer (default 5 s). */
  maxDelayMs?: number;
  /** Consecutive attempts without a welcome before the client suspends (default: no cap). */
  maxAttempts?: number;
}

export type ResolvedRetry = Required<RetryPolicy>;

/** `retry` wins over the older `backoff: {initialMs, maxMs}` option, which stays accepted. */
export function resolveRetry(
  retry: RetryPolicy | undefined,
  backoff: { initialMs?: number; maxMs?: number } | undefined,
): ResolvedRetry {
  const policy = {
    initialDelayMs: retry?.initialDelayMs ?? backoff?.initialMs ?? 100,
    maxDelayMs: retry?.maxDelayMs ?? backoff?.maxMs ?? 5000,
    maxAttempts: retry?.maxAttempts ?? Number.POSITIVE_INFINITY,
  };
  for (const [name, value] of Object.entries(policy)) {
    if (!(value >= 0)) throw new RangeError(`retry.${name} must be a number ≥ 0, got ${value}`);
  }
  if (policy.maxAttempts < 1) throw new RangeError('retry.maxAttempts must be at least 1');
  return policy;
}

/** The wait before attempt `attempt + 1` (attempt 0: the first retry). */
export function backoffDelay(policy: ResolvedRetry, attempt: number, random = Math.random): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** Math.min(attempt, 30));
  return random() * ceiling;
}
