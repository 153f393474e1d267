import { randomUUID } from 'node:crypto';
import { type SendPathDeps, sendMessage } from '../delivery/send-path.js';
import { notificationBody } from './notification.js';
import type { NotifyWatch } from './runner.js';

export interface NotifyOptions extends SendPathDeps {
  /** MAX_BODY_BYTES: a notification is no larger than the largest `send`. */
  maxBodyBytes: number;
}

/**
 * A triggered watch as a durable `watch.triggered` owed to the creating member until acked, through the
 * send path (a point from the member's send bucket, as a `send` would take). With the send limit spent
 * nothing is stored and the answer is `held`: the poller keeps its baseline, so the next poll compares
 * against the last value notified and notifies then (docs/watches.md).
 */
export function notifyWatch(options: NotifyOptions): NotifyWatch {
  const { metrics, maxBodyBytes } = options;
  return async (watch, oldValue, newValue) => {
    const attempt = await sendMessage(options, {
      origin: 'watch',
      sender: {
        meshId: watch.meshId,
        memberId: watch.memberId,
        sessionId: watch.sessionId,
        pubkey: watch.creator,
      },
      message: {
        id: `watch:${watch.watchId}:${randomUUID()}`,
        to: watch.creator,
        body: notificationBody(watch.watchId, watch.url, oldValue, newValue, maxBodyBytes),
        kind: 'watch.triggered',
        allowSelf: true,
      },
    });
    if (attempt.limited) return 'held';
    await attempt.accepted;
    metrics.watchNotifications.inc();
    return 'sent';
  };
}
