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

export interface Delivery {
  dispatch(meshId: string, message: DurableFrame, recipients: number[]): Promise<void>;
  close(): Promise<void>;
}
