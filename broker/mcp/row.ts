/** Row "mcpRegistry + call resolvers" (flag `ha.mcp`, docs/mcp.md): MCP tools hosted by peers. */
import { auditRow } from '../audit/row.js';
import { regionsRow } from '../regions/row.js';
import { defineRow, type RowParts } from '../rows/row.js';
import { registerMcpFrames } from './frames.js';
import { mcpLimitsOf } from './limits.js';
import type { McpRegistry, McpSink, RevokedAmong } from './mcp.js';
import { LocalMcpRegistry } from './mcp.local.js';
import { SharedMcpRegistry } from './mcp.shared.js';
import { mcpShadow } from './shadow.js';

export const mcpRow = defineRow({
  name: 'mcp',
  flag: 'ha.mcp',
  metric: 'mesh_broker_mcp_calls_total',
  doc: 'docs/mcp.md',
  uses: ['config', 'pool', 'log', 'metrics', 'connections', 'sinks', 'bus', 'redis'],
  // Registrations are audited; regions say where server lists read.
  needs: { audit: auditRow, regions: regionsRow },
  build: ({
    config,
    pool,
    log,
    metrics,
    connections,
    sinks,
    bus,
    redis,
    audit,
    regions,
  }): RowParts<McpRegistry> => {
    const sink: McpSink = {
      send: sinks.toSession,
      reaches: (sessionId) => connections.session(sessionId) !== undefined,
      callEnded: (outcome) => metrics.mcpCalls.inc({ outcome }),
    };
    const limits = mcpLimitsOf(config);
    const revokedAmong: RevokedAmong = async (meshId, pubkeys) => {
      const result = await pool.query<{ pubkey: string }>(
        `SELECT pubkey FROM members WHERE mesh_id = $1 AND pubkey = ANY ($2::text[]) AND revoked_at IS NOT NULL`,
        [meshId, pubkeys],
      );
      return new Set(result.rows.map((row) => row.pubkey));
    };
    const local = new LocalMcpRegistry(sink, config.mcpCallTimeoutMs, limits, revokedAmong);
    const shared = new SharedMcpRegistry(
      pool,
      bus,
      config.nodeId,
      sink,
      config.mcpCallTimeoutMs,
      log,
      limits,
      regions.view,
    );
    return {
      local,
      shared,
      // Servers move with the flip, both ways; calls in flight then are answered, not moved (docs/mcp.md).
      handOver: async (_from, _to, target) => {
        if (target === 'shared') await shared.adopt(local.entries());
        else local.adopt(await shared.hostedHere());
      },
      frames: (routes, mcp) => registerMcpFrames(routes, mcp, audit.view),
      shadow: () => mcpShadow({ local, redis, nodeId: config.nodeId, limits, revokedAmong }),
      session: (mcp) => ({
        started: (identity) => mcp.hostReconnected(identity),
        socketClosed: (identity) => mcp.hostDisconnected(identity),
        ended: (meshId, sessionId) => mcp.sessionEnded(meshId, sessionId),
      }),
    };
  },
});
