/**
 * Row "urlWatches" (flag `ha.watches`, docs/watches.md): who polls URL watches. Background work: while
 * local, it runs only where the active lease allows it. The row owns its store, its frames
 * (`watch.create|delete|list`) and the ending of a revoked member's watches.
 */
import { auditRow } from '../audit/row.js';
import { deliveryRow } from '../delivery/row.js';
import { rateLimitsRow } from '../rate-limits/row.js';
import { regionsRow } from '../regions/row.js';
import { defineRow, type RowParts } from '../rows/row.js';
import { registerWatchFrames } from './frames.js';
import { notifyWatch } from './notify.js';
import { WatchPoller } from './poller.js';
import type { WatchRunner } from './runner.js';
import { LocalWatchRunner } from './runner.local.js';
import { SharedWatchRunner } from './runner.shared.js';
import { WatchStore } from './store.js';

export const watchesRow = defineRow({
  name: 'watches',
  flag: 'ha.watches',
  metric: 'mesh_broker_watch_notifications_total',
  doc: 'docs/watches.md',
  background: true,
  uses: ['config', 'pool', 'log', 'metrics'],
  // Notifications are sent as a `send` is and take from the send limit (docs/watches.md § Bounds of a
  // notification); creates and deletes are audited; regions say where lists read and who polls.
  needs: { delivery: deliveryRow, limits: rateLimitsRow, audit: auditRow, regions: regionsRow },
  build: ({ config, pool, log, metrics, delivery, limits, audit, regions }): RowParts<WatchRunner> => {
    const watchStore = new WatchStore(pool);
    // One poller: the two runners only decide which watches this node polls.
    const poller = new WatchPoller(
      watchStore,
      notifyWatch({
        store: watchStore,
        messages: delivery.messages,
        delivery: delivery.view,
        limits: limits.view,
        metrics,
        maxBodyBytes: config.maxBodyBytes,
      }),
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
      homeRule: regions.view,
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
      frames: (routes, runner) =>
        registerWatchFrames(routes, {
          store: watchStore,
          lists: regions.view,
          runner,
          audit: audit.view,
          nodeId: config.nodeId,
          limits: { perMember: config.watchMaxPerMember, perMesh: config.watchMaxPerMesh },
          allowPrivate: config.watchAllowPrivate,
        }),
      // Every poller re-reads a watch before it fetches and skips a revoked member's: ending them in
      // Postgres stops them on every node.
      memberRevoked: async (member) => {
        await watchStore.endMemberWatches(member.id);
      },
    };
  },
});
