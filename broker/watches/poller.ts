import type { Logger } from '../log.js';
import { PeriodicTask } from '../timing/periodic.js';
import { type FetchOptions, fetchWatchValue, parseNotifyOn, shouldNotify } from './fetch-value.js';
import type { NotifyWatch } from './runner.js';
import type { Watch, WatchStore } from './store.js';

/** `lastError` of a poll whose notification waits for the member's send limit. */
export const HELD_BACK = "notification held back: the member's send limit is spent; the next poll notifies";

interface Polled {
  watch: Watch;
  /** The watch's polls: the next one `intervalSec` after the last one ended. */
  polls: PeriodicTask;
}

/**
 * Polls the watches this node runs, each on its own timer: the first poll at once, then every
 * `intervalSec`. What a runner decides is only which watches this node polls. Nothing of a watch's state is
 * kept here: each poll reads the row (whichever node wrote it last) and writes only if the row is still as
 * it read it, so two nodes polling one watch (a takeover, an owner paused past its lease) notify each change
 * once (docs/watches.md § One notification per change).
 */
export class WatchPoller {
  private readonly polled = new Map<string, Polled>();

  constructor(
    private readonly store: WatchStore,
    private readonly notify: NotifyWatch,
    private readonly fetchOptions: FetchOptions,
    private readonly log: Logger,
  ) {}

  has(watchId: string): boolean {
    return this.polled.has(watchId);
  }

  ids(): string[] {
    return [...this.polled.keys()];
  }

  watches(): Watch[] {
    return [...this.polled.values()].map((entry) => entry.watch);
  }

  /**
   * Polls a watch from now on: at once if it was never polled (the baseline) or is due, else when its
   * interval since the last poll ends. The last poll's time is read from its row (whichever node made it),
   * so a watch handed over keeps its rhythm (and each poll reads its baseline from the row).
   */
  start(watch: Watch): void {
    if (this.polled.has(watch.watchId)) return;
    const entry: Polled = {
      watch,
      polls: new PeriodicTask({
        everyMs: watch.intervalSec * 1000,
        cadence: 'after-run',
        run: () => this.poll(entry),
        onError: { log: this.log, message: 'watch poll failed', fields: { watchId: watch.watchId } },
      }),
    };
    this.polled.set(watch.watchId, entry);
    void this.store
      .lastPoll(watch.watchId)
      .catch(() => undefined)
      .then((last) => {
        if (this.polled.get(watch.watchId) !== entry) return; // stopped meanwhile
        const lastAt = (last?.lastCheckedAt ?? watch.lastCheckedAt)?.getTime() ?? 0;
        const wait = lastAt === 0 ? 0 : Math.max(0, lastAt + watch.intervalSec * 1000 - Date.now());
        entry.polls.start(wait);
      });
  }

  /** Stops polling the watch; resolves once its poll in flight (if any) has ended. */
  stop(watchId: string): Promise<void> {
    const stopped = this.polled.get(watchId)?.polls.stop() ?? Promise.resolve();
    this.polled.delete(watchId);
    return stopped;
  }

  /** Stops every watch here; resolves once their polls in flight have ended. */
  async stopAll(): Promise<void> {
    await Promise.all(this.ids().map((id) => this.stop(id)));
  }

  /** Resolves once the watch's poll in flight (if any) has ended; polling goes on. */
  settled(watchId: string): Promise<void> {
    return this.polled.get(watchId)?.polls.settled() ?? Promise.resolve();
  }

  private async poll(entry: Polled): Promise<void> {
    const { watch } = entry;
    // The row now: the baseline to compare with, as the last poll of any node left it. Gone (deleted on
    // another node, or its member revoked): never fetch for it again, whichever runner holds it.
    const seen = await this.store.pollState(watch.watchId);
    if (!seen) {
      if (this.polled.get(watch.watchId) === entry) this.stop(watch.watchId);
      return;
    }
    if (this.polled.get(watch.watchId) !== entry) return; // stopped while checking
    let value: string | null = null;
    let error: string | null = null;
    try {
      value = await fetchWatchValue(watch.url, watch.mode, watch.extract ?? undefined, this.fetchOptions);
    } catch (failure) {
      error = (failure as Error).message;
    }
    if (this.polled.get(watch.watchId) !== entry) return; // stopped while fetching
    try {
      if (value !== null && shouldNotify(parseNotifyOn(watch.notifyOn), seen.lastValue ?? undefined, value)) {
        // `sent`: committed with the new baseline; `superseded`: the row moved since it was read (another
        // node polled or notified meanwhile), and that write stands.
        if ((await this.notify(watch, seen, value)) !== 'held') return;
        // Not lost: the baseline stays the last value notified, so the next poll compares against it
        // and notifies once the member's send limit allows (a change undone meanwhile is not reported).
        value = null;
        error = HELD_BACK;
      }
      // Unless the row moved since it was read: a stale poll never moves a baseline another poll set.
      await this.store.recordPoll(watch.watchId, seen, value, error);
    } catch (failure) {
      this.log.warn({ err: failure, watchId: watch.watchId }, 'watch poll bookkeeping failed');
    }
  }
}
