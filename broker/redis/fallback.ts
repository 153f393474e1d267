/**
 * The one way a row tries Redis and falls back to this node's memory (rate limits, hello nonces, the
 * connection cap): Redis is tried only while the guard allows it (connected, not paused after a timeout);
 * a failure tells the guard, and the call is answered by the local implementation instead. Each fallback
 * is counted (`mesh_broker_redis_fallback_total{row}`, through `onFallback`); the first of a run of them is
 * logged as a warning, and the first success after them, when the row says so, as info.
 */
import type { Logger } from '../log.js';
import type { RedisGuard } from './guard.js';

export interface RedisFallbackOptions {
  guard: RedisGuard;
  /** Counts one fallback (metrics.redisFallbacks with the row's label). */
  onFallback: () => void;
  log: Logger;
  /** Logged (warn) when the row starts falling back, e.g. 'rate limits: Redis unavailable, …'. */
  fallingBackMessage: string;
  /** Logged (info) when Redis answers again after a fallback; nothing when absent. */
  recoveredMessage?: string;
}

export class RedisWithFallback {
  private fallingBack = false;

  constructor(private readonly options: RedisFallbackOptions) {}

  /** `viaRedis()` when Redis is usable and answers; else (and after it failed) `locally()`. */
  async run<T>(viaRedis: () => Promise<T>, locally: () => Promise<T>): Promise<T> {
    const { guard, log, recoveredMessage } = this.options;
    if (guard.usable()) {
      try {
        const result = await viaRedis();
        if (this.fallingBack && recoveredMessage) log.info(recoveredMessage);
        this.fallingBack = false;
        return result;
      } catch (error) {
        guard.failed(error);
        this.noteFallback(error as Error);
      }
    } else {
      this.noteFallback(new Error('redis unavailable or stalled'));
    }
    return locally();
  }

  private noteFallback(error: Error): void {
    this.options.onFallback();
    if (!this.fallingBack) this.options.log.warn({ err: error }, this.options.fallingBackMessage);
    this.fallingBack = true;
  }
}
