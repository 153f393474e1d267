import { randomUUID } from 'node:crypto';
import type { Delivery } from '../delivery/delivery.js';
import type { MessageStore } from '../delivery/store.js';
import type { BrokerMetrics } from '../metrics.js';
import type { RateLimits } from '../rate-limits/rate-limits.js';
import { notificationBody } from './notification.js';
import type { NotifyWatch } from './runner.js';

export interface NotifyOptions {
  messages: MessageStore;
  delivery: Delivery;
  /** The send limit: a notification takes a point from its member's bucket, as a `send` would. */
  limits: RateLimits;
  metrics: BrokerMetrics;
  /** MAX_BODY_BYTES: a notification is no larger than the largest `send`. */
  maxBodyBytes: number;
}

/**
 * A triggered watch as a durable `watch.triggered` owed to the creating member until acked. With the
 * member's send limit spent nothing is stored and the answer is `held`: the poller keeps its baseline,
 * so the next poll compares against the last value notified and notifies then (docs/watches.md).
 */
export function notifyWatch(options: NotifyOptions): NotifyWatch {
  const { messages, delivery, limits, metrics, maxBodyBytes } = options;
  return async (watch, oldValue, newValue) => {
    const decision = await limits.consume('send', `${watch.meshId}:${watch.creator}`);
    if (!decision.allowed) {
      metrics.rateLimited.inc({ kind: 'watch' });
      return 'held';
    }
    const accepted = await messages.accept(
      { meshId: watch.meshId, memberId: watch.memberId, sessionId: watch.sessionId, pubkey: watch.creator },
      {
        id: `watch:${watch.watchId}:${randomUUID()}`,
        to: watch.creator,
        body: notificationBody(watch.watchId, watch.url, oldValue, newValue, maxBodyBytes),
        kind: 'watch.triggered',
        allowSelf: true,
      },
    );
    if (!accepted.duplicate) delivery.dispatch(watch.meshId, accepted);
    metrics.watchNotifications.inc();
    return 'sent';
  };
}
