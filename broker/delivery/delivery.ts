/**
 * Delivery: getting an accepted message to its recipients' connected sessions.
 *
 * Contract:
 * - `dispatch` is called after the message's rows are committed (MessageStore.accept), so a message that
 *   `dispatch` cannot deliver now is still owed and goes out when the recipient's session (re)connects.
 * - Each recipient's sessions get the frame at most once per call; the SDK drops duplicates by
 *   `messageId`, so an implementation may deliver again when unsure, never less.
 * - Calls for one sender are made in send order, and an implementation keeps that order per recipient.
 */
import type { DurableFrame } from '../connections/connection.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import type { Lifecycle } from '../rows/lifecycle.js';

export interface Delivery extends Lifecycle {
  dispatch(meshId: string, message: DurableFrame, recipients: number[]): Promise<void>;
}

/** Hands a durable frame to this node's sessions of the recipient members; how many sockets got it. */
export function deliverToSessions(
  connections: ConnectionRegistry,
  message: DurableFrame,
  recipients: number[],
): number {
  let count = 0;
  for (const memberId of recipients) {
    for (const connection of connections.ofMember(memberId)) {
      connection.deliver(message);
      count++;
    }
  }
  return count;
}
