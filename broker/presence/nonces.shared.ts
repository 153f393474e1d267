import type { Logger } from '../log.js';
import type { RedisClient } from '../redis/clients.js';
import { RedisWithFallback } from '../redis/fallback.js';
import type { RedisGuard } from '../redis/guard.js';
import type { NonceGuard } from './nonces.js';

/**
 * Cluster-wide replay protection (flag `ha.presence`): a nonce is claimed with one atomic
 * `SET key 1 NX PX window` in Redis, so a hello is accepted once, whichever node it reaches. With Redis
 * unreachable it falls back to this node's memory (a replay on another node is then possible for the
 * window), logs the first fallback and counts each one.
 */
export class SharedNonceGuard implements NonceGuard {
  private readonly redisFirst: RedisWithFallback;

  constructor(
    private readonly redis: RedisClient,
    guard: RedisGuard,
    private readonly windowMs: number,
    private readonly fallback: NonceGuard,
    onFallback: () => void,
    log: Logger,
  ) {
    this.redisFirst = new RedisWithFallback({
      guard,
      onFallback,
      log,
      fallingBackMessage: 'hello nonces: Redis unavailable, per-node replay check only',
    });
  }

  claim(nonce: string): Promise<boolean> {
    return this.redisFirst.run(
      async () => {
        const set = await this.redis.set(`nonce:${nonce}`, '1', 'PX', this.windowMs, 'NX');
        // Also remembered locally, so a fallback later still refuses what was claimed now.
        await this.fallback.claim(nonce);
        return set === 'OK';
      },
      () => this.fallback.claim(nonce),
    );
  }

  async close(): Promise<void> {
    await this.fallback.close();
  }
}
