import type { Lifecycle } from '../rows/lifecycle.js';

/**
 * The per-mesh connection cap (docs/design.md §2, row "connectionsPerMesh").
 *
 * Contract: `admit` is asked once per accepted hello; a session already admitted (a replacing
 * connection) is admitted again without counting twice. `release` is called when the session's
 * current socket closes.
 */
export interface ConnectionCap extends Lifecycle {
  admit(meshId: string, sessionId: string): Promise<boolean>;
  release(meshId: string, sessionId: string): Promise<void>;
}
