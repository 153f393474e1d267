/**
 * Row "urlWatches" (flag `ha.watches`, docs/watches.md): who polls URL watches. Background work: while
 * local, it runs only where the active lease allows it.
 */
import type { Delivery } from '../delivery/delivery.js';
import type { RateLimits } from '../rate-limits/rate-limits.js';
import type { WithRegions } from '../regions/regions.js';
import type { RowContext } from '../rows/context.js';
import { defineRow } from '../rows/row.js';
import { notifyWatch } from './notify.js';
import { WatchPoller } from './poller.js';
import type { WatchRunner } from './runner.js';
import { LocalWatchRunner } from './runner.local.js';
import { SharedWatchRunner } from './runner.shared.js';

export interface WatchDeps extends RowContext, WithRegions {
  delivery: Delivery;
  /** The send limit every notification takes from (docs/watches.md § Bounds of a notification). */
  limits: RateLimits;
}

export const watchesRow = defineRow<WatchRunner, WatchDeps>({
  flag: 'ha.watches',
  metric: 'mesh_broker_watch_notifications_total',
  doc: 'docs/watches.md',
  background: true,
  build: ({ config, pool, log, metrics, messages, watchStore, delivery, limits, regions }) => {
    // One poller: the two runners only decide which watches this node polls.
    const poller = new WatchPoller(
      watchStore,
      notifyWatch({ messages, delivery, limits, metrics, maxBodyBytes: config.maxBodyBytes }),
      {
        timeoutMs: config.watchFetchTimeoutMs,
        maxBytes: config.watchMaxBytes,
        allowPrivate: config.watchAllowPrivate,
      },
      log,
    );
    metrics.watchesPolled(() => poller.ids().length);
    const local = new LocalWatchRunner(watchStore, poller, log);
    const shared = new SharedWatchRunner({
      pool,
      poller,
      nodeId: config.nodeId,
      leaseMs: config.nodeDeadMs,
      nodeDeadMs: config.nodeDeadMs,
      homeRule: regions,
      log,
    });
    return {
      local,
      shared,
      // A flip back to local keeps polling what this node polled (the shared runner gave the leases back).
      handOver: async (_from, _to, target) => {
        if (target === 'local') local.adopt(shared.handedBack);
      },
      session: (watches) => ({ ended: (meshId, sessionId) => watches.sessionEnded(meshId, sessionId) }),
    };
  },
});
