/** The durable rows of messaging as the node reads them, and the frames recipients get for them. */
import type { DurableFrame } from '../connections/connection.js';
import { formatMessageId } from './message-id.js';

/** Who a stored message is from: a member's session (a peer's send, or its schedule or watch). */
export interface Sender {
  meshId: string;
  memberId: number;
  sessionId: string;
  pubkey: string;
}

export interface NewMessage {
  /** The idempotency key: a retried id of the same sender is the same message. */
  id: string;
  to: string;
  body: string;
  /** `message` (default) or `watch.triggered` (body is the notification's JSON). */
  kind?: 'message' | 'watch.triggered';
  scheduleId?: string;
  occurrence?: number;
  /** The sender itself may be the recipient (watch notifications); peers' sends may not. */
  allowSelf?: boolean;
}

export interface AcceptedMessage {
  frame: DurableFrame;
  /** Member ids owed this message. */
  recipients: number[];
  /** Each recipient's seq for this message: [memberId, seq]. Empty for a duplicate. */
  seqs: Array<[number, number]>;
  /** True when this `id` had been accepted before: nothing new was stored and nothing is sent again. */
  duplicate: boolean;
  /** The nodes holding a session of a recipient (DM and group messages); undefined for a broadcast. */
  nodes?: string[];
  /** Broadcast or group recipients skipped because their backlog was full. */
  dropped: number;
}

export interface MessageRow {
  id: number;
  /** The row's random tag: the messageId is `<id>-<tag>` (message-id.ts). */
  tag: string;
  clientId: string;
  from: string;
  fromSession: string;
  target: string;
  body: string;
  kind: string;
  scheduleId: string | null;
  occurrence: number | null;
  createdAt: Date;
}

/** The columns of a MessageRow, from `messages m JOIN members s ON s.id = m.sender_id`. */
export const MESSAGE_COLUMNS = `m.id, m.tag, m.client_id AS "clientId", s.pubkey AS "from", m.sender_session AS "fromSession",
  m.target, m.body, m.kind, m.schedule_id AS "scheduleId", m.occurrence, m.created_at AS "createdAt"`;

/** The frame a recipient gets for a stored row: a `message`, or a durable `watch.triggered`. */
export function toFrame(row: MessageRow): DurableFrame {
  const base = { messageId: formatMessageId(row.id, row.tag), sentAt: row.createdAt.toISOString() };
  if (row.kind === 'watch.triggered') {
    return { type: 'watch.triggered', ...base, ...(JSON.parse(row.body) as object) };
  }
  return {
    type: 'message',
    ...base,
    id: row.clientId,
    from: row.from,
    fromSession: row.fromSession,
    to: row.target,
    body: row.body,
    ...(row.scheduleId === null ? {} : { scheduleId: row.scheduleId, occurrence: row.occurrence }),
  };
}
