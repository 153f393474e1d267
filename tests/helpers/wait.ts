/**
 * The tests' one way of waiting (issue 29, item 4): `waitFor` polls a condition, `within` bounds a wait on
 * an event, and `pause` is the fixed sleep, for the few places where a stretch of time itself is what the
 * test needs (each call says why). Nothing else in tests/ sleeps or loops on a clock.
 */

export interface WaitOptions {
  /** Give up (throw) after this long. */
  timeoutMs?: number;
  /** Time between two looks at the condition. */
  intervalMs?: number;
  /** Named in the error on a timeout. */
  what?: string;
}

/** Polls `condition` until it returns a truthy value or the deadline passes; resolves with that value. */
export async function waitFor<T>(
  condition: () => T | Promise<T>,
  { timeoutMs = 5000, intervalMs = 25, what = 'condition' }: WaitOptions = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await timer(intervalMs);
  }
}

/**
 * `waitFor` that does not throw on a timeout: resolves true once `condition` held, false when it still did
 * not after `timeoutMs` (for a caller that reports what it found instead, e.g. the processes still running).
 */
export async function waitForOrGiveUp(
  condition: () => unknown | Promise<unknown>,
  options: Omit<WaitOptions, 'what'> = {},
): Promise<boolean> {
  return waitFor(async () => Boolean(await condition()), options).then(
    () => true,
    () => false,
  );
}

/**
 * `event`'s value, or `otherwise` when it has not settled within `ms`: a bounded wait on something that
 * happens (an exit, a frame), which ends as soon as it does; never a sleep of `ms`.
 */
export function within<T, U>(event: Promise<T>, ms: number, otherwise: U): Promise<T | U> {
  let timeout: NodeJS.Timeout | undefined;
  const deadline = new Promise<U>((resolve) => {
    timeout = setTimeout(() => resolve(otherwise), ms);
  });
  return Promise.race([event, deadline]).finally(() => clearTimeout(timeout));
}

/**
 * The fixed sleep. Only where no event can say "now": a window in which something must NOT happen, or a
 * pace that is part of what is tested. `why` is required so that each use explains itself where it stands.
 */
export function pause(ms: number, why: string): Promise<void> {
  void why;
  return timer(ms);
}

function timer(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
