/** Row "streamSubscriptions" (flag `ha.streams`, docs/streams.md): pub/sub inside a mesh, with positions. */
import { secondsSince } from '../bus/latency.js';
import { RedisGuard } from '../redis/guard.js';
import { regionsRow } from '../regions/row.js';
import { defineRow, type RowParts } from '../rows/row.js';
import { PeriodicTask } from '../timing/periodic.js';
import { Continuity } from './continuity.js';
import { registerStreamFrames } from './frames.js';
import { MemoryHistory } from './history.memory.js';
import { historyClient, RedisHistory } from './history.redis.js';
import { streamsShadow } from './shadow.js';
import type { Streams } from './streams.js';
import { LocalStreams } from './streams.local.js';
import { SharedStreams } from './streams.shared.js';

export const streamsRow = defineRow({
  name: 'streams',
  flag: 'ha.streams',
  metric: 'mesh_broker_stream_publishes_total',
  doc: 'docs/streams.md',
  uses: ['config', 'log', 'pool', 'metrics', 'sinks', 'bus', 'connections', 'redis'],
  // `stream.list` counts read where the regions row says lists read.
  needs: { regions: regionsRow },
  build: ({ config, log, pool, metrics, sinks, bus, connections, redis, regions }): RowParts<Streams> => {
    const maxPerSession = config.streamMaxSubscriptionsPerSession;
    const bounds = {
      size: config.streamHistorySize,
      ttlMs: config.streamHistoryTtlMs,
      bytes: config.streamHistoryBytes,
    };
    const onGap = (outcome: 'recovered' | 'reported') => metrics.streamGaps.inc({ outcome });
    const on = config.streamPositions;
    // The shared implementation is built on the local registry, which decides who gets a frame here.
    const local = new LocalStreams(
      sinks.streams,
      maxPerSession,
      on
        ? (registry) =>
            new Continuity(new MemoryHistory(bounds, config.streamHistoryNodeBytes), registry, onGap)
        : undefined,
    );
    const historyRedis = on ? historyClient(redis, config.redisTimeoutMs) : undefined;
    const shared = historyRedis
      ? new Continuity(new RedisHistory(historyRedis, bounds, new RedisGuard(historyRedis)), local, onGap)
      : undefined;
    // What reached this node over the bus is compared with the shared positions, whichever side is in use.
    const check = new PeriodicTask({
      everyMs: config.streamPositionCheckMs,
      run: () => shared?.check(),
      onError: { log, message: 'stream position check failed' },
    });
    return {
      local,
      shared: new SharedStreams(
        local,
        pool,
        bus,
        () => connections.all().flatMap((c) => (c.identity ? [c.identity.sessionId] : [])),
        maxPerSession,
        regions.view,
        shared,
      ),
      frames: (routes, streams) => registerStreamFrames(routes, streams, metrics),
      shadow: () =>
        streamsShadow({
          local,
          redis,
          maxPerSession,
          sessionsHere: () => connections.all().flatMap((c) => (c.identity ? [c.identity] : [])),
        }),
      session: (streams) => ({
        started: (identity) => streams.sessionStarted(identity.meshId, identity.sessionId),
        ended: (meshId, sessionId) => streams.sessionEnded(meshId, sessionId),
      }),
      // What shared nodes publish reaches this node's subscribers in either mode, in offset order.
      relays: [
        {
          kind: 'stream.data',
          handle: (meshId, { publishedAt, ...frame }) => {
            const count = local.subscriberCount(meshId, frame.stream);
            if (shared) shared.accept(meshId, frame);
            else local.deliverHere(meshId, frame);
            if (count > 0) metrics.fanoutLatency.observe({ kind: 'stream' }, secondsSince(publishedAt));
          },
        },
      ],
      nodeWork: historyRedis
        ? [
            {
              start: () => {
                historyRedis.connect().catch(() => {});
                check.start();
              },
              stop: async () => {
                await check.stop();
                historyRedis.disconnect();
              },
            },
          ]
        : [],
    };
  },
});
