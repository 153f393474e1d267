/**
 * The one way the broker runs something again and again (heartbeats, reapers, pollers, lease rounds, clock
 * ticks, …): start/stop, optional jitter, one error policy, and signals for tests. One-shot timeouts
 * (request timeouts, grace timers, backoff sleeps) are not periodic tasks and stay plain `setTimeout`s.
 *
 * Semantics every task shares (what the hand-written `setInterval`s with a `running ??=` guard did):
 * - a round never overlaps the next: a round that comes due while the previous one is still running is
 *   skipped (a `run` that wants rounds to queue up, like a clock's serial ticks, returns without waiting);
 * - the timer never keeps the process alive (`unref`);
 * - an error escaping `run` is handled by the task's policy (logged, optionally counted) and the next
 *   round runs as planned: a failing round never stops the task.
 */
export interface ErrorPolicy {
  /** A pino logger, or anything with its `warn(fields, message)`. */
  log: { warn: (fields: object, message: string) => void };
  /** The log line's message, e.g. 'node heartbeat failed'. */
  message: string;
  /** Extra fields for the log line (e.g. `{ meshId }`). */
  fields?: object;
  /** Counts each failed round (a metric), besides the log line. */
  count?: (error: unknown) => void;
}

export interface PeriodicTaskOptions {
  /** One round. The round is in flight until the promise it returns settles. */
  run: () => Promise<void> | void;
  /** The period between rounds (before jitter). */
  everyMs: number;
  /**
   * `rate` (the default, as `setInterval`): a round comes due every `everyMs` whatever the rounds take.
   * `after-run`: the next round comes due `everyMs` after the previous one ended (a poll that must not
   * come back sooner than its interval after a slow fetch).
   */
  cadence?: 'rate' | 'after-run';
  /** The first round's delay after `start()`; defaults to `everyMs`. 0 starts it at once (not awaited). */
  firstInMs?: number;
  /** Spreads each delay uniformly by up to ± this fraction of it (0 to 1; default 0: exact periods). */
  jitter?: number;
  onError: ErrorPolicy;
  /** For tests: the source of jitter, [0, 1). */
  random?: () => number;
}

export class PeriodicTask {
  private timer: NodeJS.Timeout | undefined;
  private started = false;
  private inFlight: Promise<void> | undefined;
  /** Test signal: who waits for the next round to end (`nextRound`). */
  private waiters: Array<() => void> = [];

  constructor(private readonly options: PeriodicTaskOptions) {
    const jitter = options.jitter ?? 0;
    if (jitter < 0 || jitter > 1) throw new Error(`jitter is a fraction from 0 to 1, not ${jitter}`);
  }

  /** Between `start()` and `stop()`: what callers used to read from "is my timer set". */
  get running(): boolean {
    return this.started;
  }

  /**
   * Arms the task (again after a stop); a second start while running changes nothing. `firstInMs`
   * (default: the option, else one period) is the first round's delay; 0 starts that round at once.
   */
  start(firstInMs = this.options.firstInMs ?? this.period()): void {
    if (this.started) return;
    this.started = true;
    if (firstInMs <= 0) this.due();
    else this.arm(firstInMs);
  }

  /** Disarms the task; resolves once a round in flight (if any) has ended. */
  stop(): Promise<void> {
    this.started = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    return this.inFlight ?? Promise.resolve();
  }

  /**
   * One round now, or the round already in flight: never two at once. Works whether the task is started
   * or not (a caller's "do it now", and a test's trigger); errors go to the task's policy, never to the caller.
   */
  runNow(): Promise<void> {
    this.inFlight ??= this.round();
    return this.inFlight;
  }

  /** Resolves once the round in flight (if any) has ended, without stopping the task. */
  settled(): Promise<void> {
    return this.inFlight ?? Promise.resolve();
  }

  /** Test signal: resolves when the next round to start from now has ended (whatever triggered it). */
  nextRound(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private async round(): Promise<void> {
    const waiting = this.waiters;
    this.waiters = [];
    try {
      await this.options.run();
    } catch (error) {
      const { log, message, fields, count } = this.options.onError;
      log.warn({ ...fields, err: error }, message);
      count?.(error);
    } finally {
      this.inFlight = undefined;
      for (const resolve of waiting) resolve();
    }
  }

  private arm(delayMs: number): void {
    this.timer = setTimeout(() => this.due(), this.jittered(delayMs));
    this.timer.unref();
  }

  private due(): void {
    if (!this.started) return;
    const everyMs = this.period();
    if ((this.options.cadence ?? 'rate') === 'rate') {
      this.arm(everyMs);
      if (!this.inFlight) void this.runNow();
      return;
    }
    this.timer = undefined;
    void this.runNow().then(() => {
      // Not when stopped meanwhile, nor when a stop and a start meanwhile armed a new timer.
      if (this.started && this.timer === undefined) this.arm(everyMs);
    });
  }

  /** As `setInterval` reads its delay: below 1 ms (or not a number), 1 ms. */
  private period(): number {
    return Math.max(this.options.everyMs || 1, 1);
  }

  private jittered(delayMs: number): number {
    const jitter = this.options.jitter ?? 0;
    if (jitter === 0 || delayMs === 0) return delayMs;
    const random = this.options.random ?? Math.random;
    return Math.max(0, Math.round(delayMs * (1 + jitter * (2 * random() - 1))));
  }
}
