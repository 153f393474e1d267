/**
 * Delivery: getting an accepted message to its recipients' sessions (docs/delivery.md).
 *
 * Contract:
 * - `dispatch` is called once a message's rows are committed (MessageStore.accept). It never waits: it
 *   wakes the feeds of the recipients' sessions, and each feed writes what its member is owed, in seq
 *   order, from Postgres. A message `dispatch` does not get to a session now is still owed and goes out at
 *   the session's next wake-up or connect.
 * - Order: a session's feed never writes a member's message before an earlier one (by seq), so a sender's
 *   messages reach each recipient session in send order, whatever wake-ups are lost.
 * - A session may get a message again after a reconnect (its new feed replays what is unacked); the SDK
 *   drops repeats by `messageId`.
 * Implementations differ in which sessions a dispatch wakes: this node's only, or every node's.
 */
import type { ConnectionRegistry } from '../connections/registry.js';
import type { Lifecycle } from '../rows/lifecycle.js';
import type { AcceptedMessage } from './records.js';

export interface Delivery extends Lifecycle {
  dispatch(meshId: string, accepted: AcceptedMessage): void;
}

/** Where a wake-up came from (the `path` label of mesh_broker_deliveries_total). */
export type WakePath = 'local' | 'remote';

/**
 * Wakes this node's sessions of the recipients, each with the message as a hint (written at once when it
 * is the next item of that session's feed). Returns how many sessions were woken.
 */
export function wakeSessions(
  connections: ConnectionRegistry,
  accepted: Pick<AcceptedMessage, 'frame' | 'seqs'>,
  path: WakePath,
): number {
  let count = 0;
  for (const [memberId, seq] of accepted.seqs) {
    for (const connection of connections.ofMember(memberId)) {
      connection.feed?.wake({ seq, frame: accepted.frame }, path);
      count++;
    }
  }
  return count;
}

/** Wakes every session of this node without a hint: each feed reads what its member is owed. */
export function wakeAll(connections: ConnectionRegistry): void {
  for (const connection of connections.all()) connection.feed?.wake();
}
