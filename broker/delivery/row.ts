/**
 * Row "direct / broadcast / group delivery" (flag `ha.delivery`, docs/delivery.md): waking the feeds of an
 * accepted message's recipients, on this node or on every node. The row owns the message store (what
 * `send` accepts, what feeds read, what schedules and watches send through) and the messaging frames.
 */

import { auditRow } from '../audit/row.js';
import { secondsSince } from '../bus/latency.js';
import { regressionDelayMs } from '../plants.js';
import { rateLimitsRow } from '../rate-limits/row.js';
import { defineRow, type RowParts } from '../rows/row.js';
import { type Delivery, wakeSessions } from './delivery.js';
import { LocalDelivery } from './delivery.local.js';
import { SharedDelivery } from './delivery.shared.js';
import { registerMessaging } from './messaging.js';
import { Retention } from './retention.js';
import { MessageStore } from './store.js';

export const deliveryRow = defineRow({
  name: 'delivery',
  flag: 'ha.delivery',
  metric: 'mesh_broker_deliveries_total',
  doc: 'docs/delivery.md',
  uses: ['config', 'pool', 'log', 'metrics', 'connections', 'bus'],
  // `send` takes from the send limit and audits what it refuses.
  needs: { audit: auditRow, limits: rateLimitsRow },
  build: ({
    config,
    pool,
    log,
    metrics,
    connections,
    bus,
    audit,
    limits,
  }): RowParts<Delivery, { messages: MessageStore }> => {
    const messages = new MessageStore(pool, {
      backlogMax: config.backlogMax,
      onBatch: (kind, size) => metrics.commitBatch.observe({ kind }, size),
    });
    return {
      local: new LocalDelivery(connections),
      shared: new SharedDelivery({
        connections,
        bus,
        store: messages,
        nodeId: config.nodeId,
        checkMs: config.deliveryCheckMs,
        published: (channel) => metrics.busWakeups.inc({ channel }),
        log,
      }),
      // What a shared node publishes wakes this node's sessions in either mode (a flip loses nothing).
      relays: [
        {
          kind: 'delivery.wake',
          handle: (_scope, wake) => {
            const deliver = () => {
              if (wakeSessions(connections, wake, 'remote') > 0)
                metrics.fanoutLatency.observe({ kind: 'message' }, secondsSince(wake.publishedAt));
            };
            // PLANTED REGRESSION (tests only): a release that makes every remote delivery 50 ms slower,
            // on while the node acts on its flag (docs/promotion.md § Analysis).
            const slow = regressionDelayMs('delivery-slow');
            if (slow > 0) setTimeout(deliver, slow);
            else deliver();
          },
        },
      ],
      frames: (routes, delivery) =>
        registerMessaging(routes, {
          store: messages,
          delivery,
          limits: limits.view,
          audit: audit.view,
          metrics,
          maxBodyBytes: config.maxBodyBytes,
        }),
      // Old messages and delivered backlog go, on every node (one round at a time cluster-wide).
      nodeWork: [
        new Retention({
          pool,
          messageRetentionMs: config.messageRetentionMs,
          backlogMaxAgeMs: config.backlogMaxAgeMs,
          intervalMs: config.retentionIntervalMs,
          removed: (what, count) => metrics.retentionDeleted.inc({ what }, count),
          log,
        }),
      ],
      exports: { messages },
    };
  },
});
