import type { Logger } from '../log.js';
import type { WatchPoller } from './poller.js';
import type { WatchRunner } from './runner.js';
import type { Watch, WatchStore } from './store.js';

/**
 * Polls, in this node's memory, the watches created through this node; a watch lives and dies with its
 * creator's session here, as in the original broker. The gap on 2+ nodes: when the creator reconnects
 * to another node (or this node dies), the session ends here and its watches end with it; nothing polls
 * them any more. While this node may not run background work (a standby), its watches wait, unpolled.
 */
export class LocalWatchRunner implements WatchRunner {
  private running = false;
  /** Watches this runner holds while it does not run: polled from the next `activate`. */
  private waiting: Watch[] = [];

  constructor(
    private readonly store: WatchStore,
    private readonly poller: WatchPoller,
    private readonly log: Logger,
  ) {}

  async activate(): Promise<void> {
    this.running = true;
    for (const watch of this.waiting.splice(0)) this.poller.start(watch);
  }

  async deactivate(): Promise<void> {
    this.running = false;
    this.waiting.push(...this.poller.watches());
    this.poller.stopAll();
  }

  async close(): Promise<void> {}

  created(watch: Watch): void {
    if (this.running) this.poller.start(watch);
    else this.waiting.push(watch);
  }

  deleted(watchId: string): void {
    this.poller.stop(watchId);
    this.waiting = this.waiting.filter((watch) => watch.watchId !== watchId);
  }

  /** Flip back to local: the watches the shared runner polled here are this runner's now. */
  adopt(watches: Watch[]): void {
    for (const watch of watches) this.created(watch);
  }

  async sessionEnded(meshId: string, sessionId: string): Promise<void> {
    const ends = (watch: Watch) => watch.meshId === meshId && watch.sessionId === sessionId;
    for (const watch of [...this.poller.watches(), ...this.waiting]) {
      if (!ends(watch)) continue;
      this.deleted(watch.watchId);
      await this.store
        .end(watch.watchId)
        .catch((error) => this.log.warn({ err: error }, 'could not end a watch'));
    }
  }
}
