import type { Logger } from '../log.js';
import { type FetchOptions, fetchWatchValue, parseNotifyOn, shouldNotify } from './fetch-value.js';
import type { NotifyWatch, WatchRunner } from './runner.js';
import type { Watch, WatchStore } from './store.js';

interface Polled {
  watch: Watch;
  timer: NodeJS.Timeout | undefined;
  lastValue: string | null;
}

/**
 * Polls, in this node's memory, the watches created through this node; a watch lives and dies with its
 * creator's session here, as in the original broker. The gap on 2+ nodes: when the creator reconnects
 * to another node (or this node dies), the session ends here and its watches end with it; nothing polls
 * them any more.
 */
export class LocalWatchRunner implements WatchRunner {
  private readonly polled = new Map<string, Polled>();
  private closed = false;

  constructor(
    private readonly store: WatchStore,
    private readonly notify: NotifyWatch,
    private readonly fetchOptions: FetchOptions,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {}

  created(watch: Watch): void {
    const entry: Polled = { watch, timer: undefined, lastValue: watch.lastValue };
    this.polled.set(watch.watchId, entry);
    void this.poll(entry);
  }

  deleted(watchId: string): void {
    const entry = this.polled.get(watchId);
    clearTimeout(entry?.timer);
    this.polled.delete(watchId);
  }

  async sessionEnded(meshId: string, sessionId: string): Promise<void> {
    for (const entry of [...this.polled.values()]) {
      if (entry.watch.meshId !== meshId || entry.watch.sessionId !== sessionId) continue;
      this.deleted(entry.watch.watchId);
      await this.store
        .end(entry.watch.watchId)
        .catch((error) => this.log.warn({ err: error }, 'could not end a watch'));
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const entry of this.polled.values()) clearTimeout(entry.timer);
    this.polled.clear();
  }

  private async poll(entry: Polled): Promise<void> {
    const { watch } = entry;
    let value: string | null = null;
    let error: string | null = null;
    try {
      value = await fetchWatchValue(watch.url, watch.mode, watch.extract ?? undefined, this.fetchOptions);
    } catch (failure) {
      error = (failure as Error).message;
    }
    if (this.polled.get(watch.watchId) !== entry) return; // deleted while fetching
    try {
      if (
        value !== null &&
        shouldNotify(parseNotifyOn(watch.notifyOn), entry.lastValue ?? undefined, value)
      ) {
        await this.notify(watch, entry.lastValue, value);
      }
      if (value !== null) entry.lastValue = value;
      await this.store.recordPoll(watch.watchId, value, error);
    } catch (failure) {
      this.log.warn({ err: failure, watchId: watch.watchId }, 'watch poll bookkeeping failed');
    }
    if (this.closed || this.polled.get(watch.watchId) !== entry) return;
    entry.timer = setTimeout(() => void this.poll(entry), watch.intervalSec * 1000);
    entry.timer.unref();
  }
}
