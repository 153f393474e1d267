/**
 * The durable messaging frames (`send`, `ack`). The store makes a message durable first (group commit);
 * the delivery implementation the node runs then wakes the recipients' feeds, without waiting.
 */
import { ProtocolError } from '../../protocol/errors.js';
import { ackFrame, sendFrame } from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { AuditLog } from '../audit/audit.js';
import type { BrokerMetrics } from '../metrics.js';
import type { RateLimits } from '../rate-limits/rate-limits.js';
import type { Delivery } from './delivery.js';
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

  // Pipelined: the checks and the submission to the group commit happen in the socket's order; the socket's
  // next send does not wait for this one's commit, so a fast sender's messages share transactions.
  router.pipelined('send', sendFrame, async (frame, { identity }) => {
    const bytes = Buffer.byteLength(frame.body, 'utf8');
    if (bytes > maxBodyBytes)
      throw new ProtocolError('too_large', `body is larger than ${maxBodyBytes} bytes`);
    const decision = await options.limits.consume('send', `${identity.meshId}:${identity.pubkey}`);
    if (!decision.allowed) {
      metrics.rateLimited.inc({ kind: 'send' });
      throw new ProtocolError('rate_limited', `sending too fast; retry in ${decision.retryAfterMs} ms`);
    }
    const accepting = store.accept(identity, { id: frame.id, to: frame.to, body: frame.body });
    const later = accepting.then(
      (accepted) => {
        if (!accepted.duplicate) {
          metrics.messagesAccepted.inc();
          if (accepted.dropped > 0) metrics.backlogRefused.inc({ kind: 'broadcast' }, accepted.dropped);
          options.delivery.dispatch(identity.meshId, accepted);
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
        }
        return {
          type: 'sent' as const,
          id: frame.id,
          messageId: accepted.frame.messageId,
          recipients: accepted.recipients.length,
        };
      },
      (error: unknown) => {
        if (error instanceof ProtocolError && error.code === 'limit_exceeded')
          metrics.backlogRefused.inc({ kind: 'dm' });
        throw error;
      },
    );
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
