import type { BackgroundGate } from '../rows/background-gate.js';

/** The gate's contract is the row framework's (rows/background-gate.ts): the reconciler asks it. */
export type { BackgroundGate };

/** Every node runs its own background work, as the single-node broker did. */
export class AlwaysActive implements BackgroundGate {
  isActive(): boolean {
    return true;
  }

  onChange(): void {}

  async activate(): Promise<void> {}

  async deactivate(): Promise<void> {}

  async close(): Promise<void> {}
}
