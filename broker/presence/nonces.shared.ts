import type { Logger } from '../log.js';
import type { RedisClient } from '../redis/clients.js';
import type { RedisGuard } from '../redis/guard.js';
import type { NonceGuard } from './nonces.js';

/**
 * Cluster-wide replay protection (flag `ha.presence`): a nonce is claimed with one atomic
 * `SET key 1 NX PX window` in Redis, so a hello is accepted once, whichever node it reaches. With Redis
 * unreachable it falls back to this node's memory (a replay on another node is then possible for the
 * window), logs the first fallback and counts each one.
 */
export class SharedNonceGuard implements NonceGuard {
  private fallingBack = false;

  constructor(
    private readonly redis: RedisClient,
    private readonly guard: RedisGuard,
    private readonly windowMs: number,
    private readonly fallback: NonceGuard,
    private readonly onFallback: () => void,
    private readonly log: Logger,
  ) {}

  async claim(nonce: string): Promise<boolean> {
    if (this.guard.usable()) {
      try {
        const set = await this.redis.set(`nonce:${nonce}`, '1', 'PX', this.windowMs, 'NX');
        // Also remembered locally, so a fallback later still refuses what was claimed now.
        await this.fallback.claim(nonce);
        this.fallingBack = false;
        return set === 'OK';
      } catch (error) {
        this.guard.failed(error);
        this.noteFallback(error as Error);
      }
    } else {
      this.noteFallback(new Error('redis unavailable or stalled'));
    }
    return this.fallback.claim(nonce);
  }

  async close(): Promise<void> {
    await this.fallback.close();
  }

  private noteFallback(error: Error): void {
    this.onFallback();
    if (!this.fallingBack)
      this.log.warn({ err: error }, 'hello nonces: Redis unavailable, per-node replay check only');
    this.fallingBack = true;
  }
}
