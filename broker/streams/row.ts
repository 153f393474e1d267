/** Row "streamSubscriptions" (flag `ha.streams`, docs/streams.md): ephemeral pub/sub inside a mesh. */
import { secondsSince } from '../bus/latency.js';
import { regionsRow } from '../regions/row.js';
import { defineRow, type RowParts } from '../rows/row.js';
import { registerStreamFrames } from './frames.js';
import type { Streams } from './streams.js';
import { LocalStreams } from './streams.local.js';
import { SharedStreams } from './streams.shared.js';

export const streamsRow = defineRow({
  name: 'streams',
  flag: 'ha.streams',
  metric: 'mesh_broker_stream_publishes_total',
  doc: 'docs/streams.md',
  uses: ['config', 'pool', 'metrics', 'sinks', 'bus', 'connections'],
  // `stream.list` counts read where the regions row says lists read.
  needs: { regions: regionsRow },
  build: ({ config, pool, metrics, sinks, bus, connections, regions }): RowParts<Streams> => {
    const maxPerSession = config.streamMaxSubscriptionsPerSession;
    // The shared implementation is built on the local registry, which decides who gets a frame here.
    const local = new LocalStreams(sinks.streams, maxPerSession);
    return {
      local,
      shared: new SharedStreams(
        local,
        pool,
        bus,
        () => connections.all().flatMap((c) => (c.identity ? [c.identity.sessionId] : [])),
        maxPerSession,
        regions.view,
      ),
      frames: (routes, streams) => registerStreamFrames(routes, streams, metrics),
      session: (streams) => ({
        started: (identity) => streams.sessionStarted(identity.meshId, identity.sessionId),
        ended: (meshId, sessionId) => streams.sessionEnded(meshId, sessionId),
      }),
      // What shared nodes publish reaches this node's subscribers in either mode.
      relays: [
        {
          kind: 'stream.data',
          handle: (meshId, { publishedAt, ...frame }) => {
            const count = local.deliverHere(meshId, frame);
            if (count > 0) metrics.fanoutLatency.observe({ kind: 'stream' }, secondsSince(publishedAt));
          },
        },
      ],
    };
  },
});
