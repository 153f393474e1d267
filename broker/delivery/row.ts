/**
 * Row "direct / broadcast / group delivery" (flag `ha.delivery`, docs/delivery.md): waking the feeds of an
 * accepted message's recipients, on this node or on every node.
 */
import { secondsSince } from '../bus/latency.js';
import type { RowContext } from '../rows/context.js';
import { defineRow } from '../rows/row.js';
import { type Delivery, wakeSessions } from './delivery.js';
import { LocalDelivery } from './delivery.local.js';
import { SharedDelivery } from './delivery.shared.js';

export const deliveryRow = defineRow<Delivery, RowContext>({
  flag: 'ha.delivery',
  metric: 'mesh_broker_deliveries_total',
  doc: 'docs/delivery.md',
  build: ({ config, log, metrics, connections, messages, bus }) => ({
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
          if (wakeSessions(connections, wake, 'remote') > 0)
            metrics.fanoutLatency.observe({ kind: 'message' }, secondsSince(wake.publishedAt));
        },
      },
    ],
  }),
});
