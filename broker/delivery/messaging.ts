/**
 * The durable messaging frames (`send`, `ack`) and the backlog replay when a session starts. The store
 * makes a message durable first; the delivery implementation the node runs then gets it to sockets.
 */
import { ProtocolError } from '../../protocol/errors.js';
import { ackFrame, sendFrame } from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { AuditLog } from '../audit/audit.js';
import type { Connection } from '../connections/connection.js';
import type { RateLimits } from '../limits/rate-limits.js';
import type { BrokerMetrics } from '../metrics.js';
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

  router.on('send', sendFrame, async (frame, { identity }) => {
    const bytes = Buffer.byteLength(frame.body, 'utf8');
    if (bytes > maxBodyBytes)
      throw new ProtocolError('too_large', `body is larger than ${maxBodyBytes} bytes`);
    const decision = await options.limits.consume('send', `${identity.meshId}:${identity.pubkey}`);
    if (!decision.allowed) {
      metrics.rateLimited.inc({ kind: 'send' });
      throw new ProtocolError('rate_limited', `sending too fast; retry in ${decision.retryAfterMs} ms`);
    }
    const accepted = await store.accept(identity, { id: frame.id, to: frame.to, body: frame.body });
    if (!accepted.duplicate) {
      metrics.messagesAccepted.inc();
      await options.delivery.dispatch(identity.meshId, accepted.frame, accepted.recipients);
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
      type: 'sent',
      id: frame.id,
      messageId: accepted.frame.messageId,
      recipients: accepted.recipients.length,
    };
  });

  router.on('ack', ackFrame, async (frame, { identity }) => {
    await store.ack(identity.memberId, frame.messageId);
    metrics.acks.inc();
    return frame.rid === undefined ? undefined : { type: 'acked', messageId: frame.messageId };
  });
}

/**
 * Sends a new session everything its member is still owed, oldest first, then the live messages that
 * arrived meanwhile (the gateway began the catch-up when it registered the socket).
 */
export async function replayBacklog(connection: Connection, store: MessageStore, metrics: BrokerMetrics) {
  let count = 0;
  try {
    for await (const message of store.pending(connection.identity!.memberId)) {
      if (!connection.isOpen) return;
      connection.replay(message);
      count++;
    }
  } finally {
    connection.endCatchUp();
    if (count > 0) metrics.deliveries.inc({ path: 'backlog' }, count);
  }
}
