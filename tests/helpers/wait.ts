/** Polls `condition` until it returns a truthy value or the deadline passes; resolves with that value. */
export async function waitFor<T>(
  condition: () => T | Promise<T>,
  { timeoutMs = 5000, intervalMs = 25, what = 'condition' } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
