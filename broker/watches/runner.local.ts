import type { Logger } from '../log.js';
import type { WatchPoller } from './poller.js';
import type { WatchRunner } from './runner.js';
import type { Watch, WatchStore } from './store.js';

/**
 * Polls, in this node's memory, the watches created through this node; a watch lives and dies with its
 * creator's session here, as in the original broker. The gap on 2+ nodes: when the creator reconnects
 * to another node (or this node dies), the session ends here and its watches end with it; nothing polls
 * them any more.
 */
export class LocalWatchRunner implements WatchRunner {
  constructor(
    private readonly store: WatchStore,
    private readonly poller: WatchPoller,
    private readonly log: Logger,
  ) {}

  /** Watches stopped by `close` (background work paused), polled again by the next `start`. */
  private paused: Watch[] = [];

  async start(): Promise<void> {
    for (const watch of this.paused.splice(0)) this.poller.start(watch);
  }

  created(watch: Watch): void {
    this.poller.start(watch);
  }

  deleted(watchId: string): void {
    this.poller.stop(watchId);
  }

  async sessionEnded(meshId: string, sessionId: string): Promise<void> {
    for (const watch of this.poller.watches()) {
      if (watch.meshId !== meshId || watch.sessionId !== sessionId) continue;
      this.poller.stop(watch.watchId);
      await this.store
        .end(watch.watchId)
        .catch((error) => this.log.warn({ err: error }, 'could not end a watch'));
    }
  }

  async close(): Promise<void> {
    this.paused.push(...this.poller.watches());
    this.poller.stopAll();
  }
}
