import type { Lifecycle } from '../rows/lifecycle.js';
/**
 * Who polls URL watches (docs/design.md §2, row "urlWatches").
 *
 * Contract:
 * - A watch is polled every `intervalSec` (the first poll at once sets the baseline); a poll whose
 *   value satisfies the watch's `notifyOn` becomes one durable `watch.triggered` to the creating member
 *   through the `NotifyWatch` callback; a failed poll is recorded (`lastError`) and notifies nothing.
 * - `created` / `deleted` tell the runner about changes made through this node; `sessionEnded` that a
 *   session left for good.
 */
import type { Watch } from './store.js';

export type NotifyWatch = (watch: Watch, oldValue: string | null, newValue: string) => Promise<void>;

export interface WatchRunner extends Lifecycle {
  created(watch: Watch): void;
  deleted(watchId: string): void;
  sessionEnded(meshId: string, sessionId: string): Promise<void>;
}
