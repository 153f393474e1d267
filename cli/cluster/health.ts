/** Waiting for a process the workbench started (a broker, a load balancer) to answer `GET /health`. */

export interface WaitHealthyOptions {
  /** Between two polls (default 100 ms). */
  intervalMs?: number;
  /** Accept only 200, not every 2xx (the tests' brokers; default false). */
  only200?: boolean;
  /** The error when the process is found dead (default: "URL exited while starting"). */
  deadError?: () => Error;
}

/**
 * Polls `url`/health until it answers 2xx; rejects as soon as `isDead()` says the process is gone, and
 * after `timeoutMs`.
 */
export async function waitHealthy(
  url: string,
  timeoutMs: number,
  isDead: () => boolean,
  options: WaitHealthyOptions = {},
): Promise<void> {
  const { intervalMs = 100, only200 = false } = options;
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (isDead()) throw options.deadError?.() ?? new Error(`${url} exited while starting`);
    const ok = await fetch(`${url}/health`).then(
      (r) => (only200 ? r.status === 200 : r.ok),
      () => false,
    );
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  throw new Error(`${url} did not become healthy within ${timeoutMs} ms`);
}
