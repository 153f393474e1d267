/**
 * Row "presence / sessions" (flag `ha.presence`, docs/presence.md): who is online, the join and leave
 * events, and the hello nonces already used.
 */

import { regionsRow } from '../regions/row.js';
import { defineRow, type RowParts } from '../rows/row.js';
import { registerPresenceFrames } from './frames.js';
import { LocalNonceGuard } from './nonces.local.js';
import { SharedNonceGuard } from './nonces.shared.js';
import type { Presence } from './presence.js';
import { LocalPresence } from './presence.local.js';
import { SharedPresence } from './presence.shared.js';
import { SessionBindings } from './session-bindings.js';
import { presenceShadow } from './shadow.js';

export const presenceRow = defineRow({
  name: 'presence',
  flag: 'ha.presence',
  metric: 'mesh_broker_hello_rejections_total',
  doc: 'docs/presence.md',
  uses: ['config', 'pool', 'log', 'metrics', 'connections', 'sinks', 'redis', 'redisGuard', 'bus'],
  // `peers.list` reads where the regions row says lists read.
  needs: { regions: regionsRow },
  build: ({
    config,
    pool,
    log,
    metrics,
    connections,
    sinks,
    redis,
    redisGuard,
    bus,
    regions,
  }): RowParts<Presence> => {
    const localNonces = new LocalNonceGuard(2 * config.helloSkewMs);
    // One table, whichever implementation runs: a flip must never free a session id.
    const bindings = new SessionBindings(pool);
    const connected = () => connections.all().flatMap((c) => (c.identity ? [c.identity] : []));
    return {
      local: new LocalPresence({
        pool,
        nodeId: config.nodeId,
        graceMs: config.presenceGraceMs,
        events: sinks.presenceEvents,
        nonces: localNonces,
        bindings,
        connected,
        log,
      }),
      shared: new SharedPresence({
        pool,
        lists: regions.view,
        bus,
        nodeId: config.nodeId,
        graceMs: config.presenceGraceMs,
        deadAfterMs: config.nodeDeadMs,
        reapEveryMs: config.heartbeatMs,
        events: sinks.presenceEvents,
        kickLocal: sinks.kickLocal,
        nonces: new SharedNonceGuard(
          redis,
          redisGuard,
          2 * config.helloSkewMs,
          localNonces,
          () => metrics.redisFallbacks.inc({ row: 'nonces' }),
          log,
        ),
        bindings,
        log,
      }),
      shadow: (sides) => presenceShadow(sides, config.nodeId),
      relays: [{ kind: 'presence.event', handle: (meshId, frame) => sinks.presenceRelay(meshId, frame) }],
      frames: registerPresenceFrames,
    };
  },
});
