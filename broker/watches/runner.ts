import type { Lifecycle } from '../rows/lifecycle.js';
/**
 * Who polls URL watches (docs/design.md §2, row "urlWatches").
 *
 * Contract:
 * - A watch is polled every `intervalSec` (the first poll at once sets the baseline); a poll whose
 *   value satisfies the watch's `notifyOn` becomes one durable `watch.triggered` to the creating member
 *   through the `NotifyWatch` callback; a failed poll is recorded (`lastError`) and notifies nothing.
 * - A watch whose member was revoked, or which was deleted on any node, is not polled again (each poll
 *   first checks its row).
 * - `created` / `deleted` tell the runner about changes made through this node; `sessionEnded` that a
 *   session left for good.
 */
import type { Watch } from './store.js';

/**
 * Stores one notification (`sent`), or stores nothing because the member's send limit is spent (`held`:
 * the poller keeps the last notified value as its baseline, so the next poll notifies instead).
 */
export type NotifyWatch = (
  watch: Watch,
  oldValue: string | null,
  newValue: string,
) => Promise<'sent' | 'held'>;

export interface WatchRunner extends Lifecycle {
  created(watch: Watch): void;
  deleted(watchId: string): void;
  sessionEnded(meshId: string, sessionId: string): Promise<void>;
}
