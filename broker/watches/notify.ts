import { randomUUID } from 'node:crypto';
import type { Delivery } from '../delivery/delivery.js';
import type { MessageStore } from '../delivery/store.js';
import type { BrokerMetrics } from '../metrics.js';
import type { NotifyWatch } from './runner.js';

/** A triggered watch as a durable `watch.triggered` owed to the creating member until acked. */
export function notifyWatch(messages: MessageStore, delivery: Delivery, metrics: BrokerMetrics): NotifyWatch {
  return async (watch, oldValue, newValue) => {
    const accepted = await messages.accept(
      { meshId: watch.meshId, memberId: watch.memberId, sessionId: watch.sessionId, pubkey: watch.creator },
      {
        id: `watch:${watch.watchId}:${randomUUID()}`,
        to: watch.creator,
        body: JSON.stringify({ watchId: watch.watchId, url: watch.url, oldValue, newValue }),
        kind: 'watch.triggered',
        allowSelf: true,
      },
    );
    if (!accepted.duplicate) delivery.dispatch(watch.meshId, accepted);
    metrics.watchNotifications.inc();
  };
}
