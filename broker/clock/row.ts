/** Row "meshClocks" (flag `ha.clock`, docs/clock.md): one simulated clock per mesh. */
import { regionsRow } from '../regions/row.js';
import { defineRow, type RowParts } from '../rows/row.js';
import type { MeshClocks } from './clock.js';
import { LocalClocks } from './clock.local.js';
import { SharedClocks } from './clock.shared.js';
import { registerClockFrames } from './frames.js';

export const clockRow = defineRow({
  name: 'clock',
  flag: 'ha.clock',
  metric: 'mesh_broker_clock_ticks_total',
  doc: 'docs/clock.md',
  uses: ['config', 'pool', 'log', 'metrics', 'connections', 'sinks', 'bus'],
  // Which nodes try to lead a mesh's clock: its home region's while one is alive.
  needs: { regions: regionsRow },
  build: ({ config, pool, log, metrics, connections, sinks, bus, regions }): RowParts<MeshClocks> => {
    const hasSessions = (meshId: string) => connections.meshSize(meshId) > 0;
    const meshesHere = () => [...connections.countsByMesh().keys()];
    const local = new LocalClocks({
      pool,
      nodeId: config.nodeId,
      tickMs: config.clockTickMs,
      log,
      hasSessions,
      meshesHere,
      sink: (meshId, frame) => {
        metrics.clockTicks.inc();
        sinks.toMesh(meshId, frame);
      },
    });
    const shared = new SharedClocks({
      pool,
      databaseUrl: config.databaseUrl,
      bus,
      nodeId: config.nodeId,
      tickMs: config.clockTickMs,
      retryMs: Math.min(500, config.clockTickMs),
      toLocalSessions: (meshId, frame) => sinks.toMesh(meshId, frame),
      hasSessions,
      meshesHere,
      onTick: () => metrics.clockTicks.inc(),
      onFenced: () => metrics.clockFenced.inc(),
      homeRule: regions.view,
      log,
    });
    return {
      local,
      shared,
      session: (clocks) => ({
        started: (identity) => clocks.meshActive(identity.meshId),
        ended: (meshId) => clocks.meshIdle(meshId),
      }),
      // The leader's ticks reach this node's sessions of the mesh in either mode.
      relays: [{ kind: 'clock.tick', handle: (meshId, frame) => sinks.toMesh(meshId, frame) }],
      frames: registerClockFrames,
      gauges: (clocks) => metrics.clocksLedBy(() => clocks.ledHere()),
    };
  },
});
