/**
 * Whether a call on a peer's path should try Redis now (rate limits, nonces, the connection cap). Every
 * Redis command times out after REDIS_TIMEOUT_MS (node/infrastructure.ts); after a timeout the guard says
 * no for a short pause, so a stalled Redis costs one timeout per pause, not one per call. Callers fall back
 * to this node's memory meanwhile, as they do while Redis is disconnected.
 */
import type { RedisClient } from './clients.js';

export class RedisGuard {
  private skipUntil = 0;

  constructor(
    private readonly redis: RedisClient,
    private readonly pauseMs = 1000,
  ) {}

  usable(): boolean {
    return this.redis.status === 'ready' && Date.now() >= this.skipUntil;
  }

  /** A call failed: after a timeout, skip Redis for the pause. */
  failed(error: unknown): void {
    if (error instanceof Error && /timed out/i.test(error.message))
      this.skipUntil = Date.now() + this.pauseMs;
  }
}
