/**
 * The durable messaging frames (`send`, `ack`). A `send` takes the shared send path (send-path.ts): its
 * send token, the durable accept (group commit), then the wake of the recipients' feeds, without waiting.
 */
import { ProtocolError } from '../../protocol/errors.js';
import { ackFrame, sendFrame } from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { AuditLog } from '../audit/audit.js';
import type { BrokerMetrics } from '../metrics.js';
import { planted } from '../plants.js';
import type { RateLimits } from '../rate-limits/rate-limits.js';
import type { Delivery } from './delivery.js';
import { sendMessage } from './send-path.js';
import type { MessageStore } from './store.js';

export interface MessagingOptions {
  store: MessageStore;
  delivery: Delivery;
  limits: RateLimits;
  audit: AuditLog;
  metrics: BrokerMetrics;
  maxBodyBytes: number;
}

export function registerMessaging(router: FrameRoutes, options: MessagingOptions): void {
  const { store, metrics, maxBodyBytes } = options;
  const path = { messages: store, delivery: options.delivery, limits: options.limits, metrics };

  // Pipelined: the checks and the submission to the group commit happen in the socket's order; the socket's
  // next send does not wait for this one's commit, so a fast sender's messages share transactions.
  router.pipelined('send', sendFrame, async (frame, { identity }) => {
    const bytes = Buffer.byteLength(frame.body, 'utf8');
    if (bytes > maxBodyBytes)
      throw new ProtocolError('too_large', `body is larger than ${maxBodyBytes} bytes`);
    const attempt = await sendMessage(path, {
      origin: 'send',
      sender: identity,
      message: { id: frame.id, to: frame.to, body: frame.body },
    });
    if (attempt.limited)
      throw new ProtocolError('rate_limited', `sending too fast; retry in ${attempt.retryAfterMs} ms`);
    const later = attempt.accepted.then((accepted) => {
      if (!accepted.duplicate)
        options.audit.record({
          meshId: identity.meshId,
          eventType: 'message.sent',
          actor: identity.pubkey,
          payload: {
            messageId: accepted.frame.messageId,
            id: frame.id,
            to: frame.to,
            recipients: accepted.recipients.length,
            bytes,
          },
        });
      return {
        type: 'sent' as const,
        id: frame.id,
        messageId: accepted.frame.messageId,
        recipients: accepted.recipients.length,
      };
    });
    if (planted('ack-before-commit')) {
      // PLANTED BUG (tests only): `sent` before the commit; a transaction that fails after it is a lost write.
      later.catch(() => {});
      return {
        later: Promise.resolve({ type: 'sent' as const, id: frame.id, messageId: '', recipients: 0 }),
      };
    }
    return { later };
  });

  // Pipelined too: a recipient acks every message it gets, and its acks share transactions.
  router.pipelined('ack', ackFrame, async (frame, { identity }) => {
    const later = store.ack(identity.memberId, frame.messageId).then(() => {
      metrics.acks.inc();
      return frame.rid === undefined ? undefined : { type: 'acked' as const, messageId: frame.messageId };
    });
    return { later };
  });
}
