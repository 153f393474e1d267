import { acceptMessage, dispatchAccepted, type SendPathDeps, takeSendToken } from '../delivery/send-path.js';
import type { NewMessage, Sender } from '../delivery/store.js';
import { notificationBody } from './notification.js';
import type { NotifyWatch } from './runner.js';
import type { Watch, WatchStore } from './store.js';

export interface NotifyOptions extends SendPathDeps {
  /** Where the notification commits with the watch's row (`WatchStore.commitNotification`). */
  store: WatchStore;
  /** MAX_BODY_BYTES: a notification is no larger than the largest `send`. */
  maxBodyBytes: number;
}

/**
 * The client id of a watch's notification number `number` (1, 2, …: `watches.notified` after it). The
 * same change notified by two nodes would be the same message (a duplicate, stored once); the row's count,
 * raised in the notification's transaction, is what keeps a second node from notifying it at all.
 */
export function watchMessageId(watchId: string, number: number): string {
  return `watch:${watchId}:${number}`;
}

function creatorOf(watch: Watch): Sender {
  return {
    meshId: watch.meshId,
    memberId: watch.memberId,
    sessionId: watch.sessionId,
    pubkey: watch.creator,
  };
}

/**
 * A triggered watch as a durable `watch.triggered` owed to the creating member until acked, through the
 * send path (a point from the member's send bucket, as a `send` would take), accepted inside the
 * transaction that moves the watch's row on (docs/watches.md § One notification per change) and
 * dispatched after its commit. With the send limit spent nothing is stored and the answer is `held`: the
 * row keeps its baseline, so the next poll compares against the last value notified and notifies then.
 */
export function notifyWatch(options: NotifyOptions): NotifyWatch {
  const { metrics, maxBodyBytes, store } = options;
  return async (watch, seen, newValue) => {
    const sender = creatorOf(watch);
    const outcome = await store.commitNotification(watch.watchId, seen, newValue, async (db, number) => {
      // Taken once the row is claimed, as a schedule's occurrence takes it: a superseded poll costs none.
      if (await takeSendToken(options, 'watch', sender)) return 'held';
      const message: NewMessage = {
        id: watchMessageId(watch.watchId, number),
        to: watch.creator,
        body: notificationBody(watch.watchId, watch.url, seen.lastValue, newValue, maxBodyBytes),
        kind: 'watch.triggered',
        allowSelf: true,
      };
      return acceptMessage(options, { origin: 'watch', sender, message }, db);
    });
    if (outcome === 'held' || outcome === 'superseded') return outcome;
    dispatchAccepted(options, outcome, watch.meshId);
    if (!outcome.duplicate) metrics.watchNotifications.inc();
    return 'sent';
  };
}
