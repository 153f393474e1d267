/**
 * The messageId a peer sees: `<id>-<tag>`, the message row's id and its random tag (migration 0014). The id
 * alone is not an identity: a restore or a promotion that lost a WAL tail sets its sequence back and hands it
 * out again; the tag (64 random bits) tells the two messages apart (docs/protocol.md § Message identity).
 */

import { MESSAGE_ID_PATTERN } from '../../protocol/requests.js';

export interface MessageIdentity {
  /** The row id (`messages.id`), as a decimal string (a bigint). */
  id: string;
  tag: string;
}

export function formatMessageId(id: number | string, tag: string): string {
  return `${id}-${tag}`;
}

/** The row id and tag of a messageId; undefined when it is not one. */
export function parseMessageId(messageId: string): MessageIdentity | undefined {
  const match = MESSAGE_ID_PATTERN.exec(messageId);
  return match ? { id: match[1]!, tag: match[2]! } : undefined;
}
