import { PeriodicTask } from '../timing/periodic.js';
import type { NonceGuard } from './nonces.js';

/**
 * This node's memory only. The gap on 2+ nodes: a hello captured on one node can be replayed once on
 * each other node within the window.
 */
export class LocalNonceGuard implements NonceGuard {
  private readonly seen = new Map<string, number>();
  private readonly sweeper: PeriodicTask;

  constructor(private readonly windowMs: number) {
    this.sweeper = new PeriodicTask({
      everyMs: Math.max(1000, windowMs / 4),
      run: () => this.sweep(),
      // A sweep is a loop over a map: it cannot fail short of a bug, which the console shows.
      onError: { log: console, message: 'hello nonce sweep failed' },
    });
    this.sweeper.start();
  }

  async claim(nonce: string): Promise<boolean> {
    const now = Date.now();
    const expiresAt = this.seen.get(nonce);
    if (expiresAt !== undefined && expiresAt > now) return false;
    this.seen.set(nonce, now + this.windowMs);
    return true;
  }

  async close(): Promise<void> {
    await this.sweeper.stop();
  }

  private sweep(): void {
    const now = Date.now();
    for (const [nonce, expiresAt] of this.seen) if (expiresAt <= now) this.seen.delete(nonce);
  }
}
