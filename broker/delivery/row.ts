/**
 * Row "direct / broadcast / group delivery" (flag `ha.delivery`, docs/delivery.md): getting an accepted
 * message to its recipients' sessions, on this node or on any node.
 */
import { secondsSince } from '../bus/latency.js';
import type { RowContext } from '../rows/context.js';
import { defineRow } from '../rows/row.js';
import { type Delivery, deliverToSessions } from './delivery.js';
import { LocalDelivery } from './delivery.local.js';
import { SharedDelivery } from './delivery.shared.js';

export const deliveryRow = defineRow<Delivery, RowContext>({
  flag: 'ha.delivery',
  metric: 'mesh_broker_deliveries_total',
  doc: 'docs/delivery.md',
  build: ({ config, log, metrics, connections, messages, bus }) => ({
    local: new LocalDelivery(connections, (path, count) => metrics.deliveries.inc({ path }, count)),
    shared: new SharedDelivery({
      connections,
      bus,
      store: messages,
      sweepMs: config.sweepMs,
      sweepMinAgeMs: config.sweepMinAgeMs,
      delivered: (path, count) => metrics.deliveries.inc({ path }, count),
      log,
    }),
    // What a shared node sends reaches this node's sessions in either mode (a flip loses nothing).
    relays: [
      {
        kind: 'delivery.message',
        handle: (_meshId, { frame, recipients, publishedAt }) => {
          const count = deliverToSessions(connections, frame, recipients);
          if (count === 0) return;
          metrics.deliveries.inc({ path: 'remote' }, count);
          metrics.fanoutLatency.observe({ kind: 'message' }, secondsSince(publishedAt));
        },
      },
    ],
  }),
});
