/** Row "connectionsPerMesh (cap)" (flag `ha.connection-cap`, docs/connection-cap.md). */
import { defineRow, type RowParts } from '../rows/row.js';
import type { ConnectionCap } from './connection-cap.js';
import { LocalConnectionCap } from './connection-cap.local.js';
import { SharedConnectionCap } from './connection-cap.shared.js';
import { connectionCapShadow } from './shadow.js';

export const connectionCapRow = defineRow({
  name: 'connection-cap',
  flag: 'ha.connection-cap',
  metric: 'mesh_broker_connection_cap_admissions_total',
  doc: 'docs/connection-cap.md',
  uses: ['config', 'log', 'metrics', 'redis', 'redisGuard'],
  build: ({ config, log, metrics, redis, redisGuard }): RowParts<ConnectionCap> => {
    const local = new LocalConnectionCap(config.meshConnectionCap);
    const shared = new SharedConnectionCap({
      redis,
      guard: redisGuard,
      nodeId: config.nodeId,
      cap: config.meshConnectionCap,
      partTtlMs: config.nodeDeadMs,
      fallback: local,
      onFallback: () => metrics.redisFallbacks.inc({ row: 'connection-cap' }),
      log,
    });
    const shadow = () =>
      connectionCapShadow({
        local,
        redis,
        nodeId: config.nodeId,
        cap: config.meshConnectionCap,
        partTtlMs: config.nodeDeadMs,
        log,
      });
    return { local, shared, shadow };
  },
});
