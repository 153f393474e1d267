import type { Lifecycle } from '../rows/lifecycle.js';

/**
 * The audit log: one hash chain per mesh (docs/protocol.md § Audit).
 *
 * Contract:
 * - `record` never throws and never blocks the caller: the entry is queued and appended in order with
 *   the mesh's other entries from this node. A failed append is retried, then logged and counted.
 * - `flush(meshId)` resolves once every entry recorded before the call is written (or given up).
 * - Implementations differ in how they find the chain head: see audit.local.ts.
 */
export interface AuditEntry {
  meshId: string;
  eventType: string;
  /** Who caused the event (a member pubkey, an operator name), or null for the broker itself. */
  actor: string | null;
  /** Metadata only: never a message body. */
  payload: Record<string, unknown>;
}

export interface AuditLog extends Lifecycle {
  record(entry: AuditEntry): void;
  flush(meshId?: string): Promise<void>;
}
