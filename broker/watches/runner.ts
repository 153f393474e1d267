import type { Lifecycle } from '../rows/lifecycle.js';
/**
 * Who polls URL watches (docs/design.md §2, row "urlWatches").
 *
 * Contract:
 * - A watch is polled every `intervalSec` (the first poll at once sets the baseline); a poll whose
 *   value satisfies the watch's `notifyOn` becomes one durable `watch.triggered` to the creating member
 *   through the `NotifyWatch` callback; a failed poll is recorded (`lastError`) and notifies nothing.
 * - Each change is notified once, whichever nodes poll the watch (a takeover, a paused owner): a poll
 *   compares against the row as it read it, and notifies and records only if the row is still so.
 * - A watch whose member was revoked, or which was deleted on any node, is not polled again (each poll
 *   first checks its row).
 * - `created` / `deleted` tell the runner about changes made through this node; `sessionEnded` that a
 *   session left for good.
 */
import type { PollState, Watch } from './store.js';

/**
 * Notifies the change from the row `seen` (read by the poll before it fetched) to `newValue`: stores one
 * notification with the row's new baseline in one transaction (`sent`); or stores nothing because the
 * member's send limit is spent (`held`: the row keeps the last notified value as its baseline, so the next
 * poll notifies instead), or because the row moved since `seen` (`superseded`: another node polled or
 * notified the watch meanwhile; its write stands).
 */
export type NotifyWatch = (
  watch: Watch,
  seen: PollState,
  newValue: string,
) => Promise<'sent' | 'held' | 'superseded'>;

export interface WatchRunner extends Lifecycle {
  created(watch: Watch): void;
  deleted(watchId: string): void;
  sessionEnded(meshId: string, sessionId: string): Promise<void>;
}
