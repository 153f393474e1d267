import {
  mcpCallFrame,
  mcpListFrame,
  mcpRegisterFrame,
  mcpResultFrame,
  mcpUnregisterFrame,
} from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { AuditLog } from '../audit/audit.js';
import type { McpRegistry } from './mcp.js';
import { pageRequest } from './page.js';

/** The MCP frames (docs/protocol.md § MCP tools hosted by peers). */
export function registerMcpFrames(router: FrameRoutes, registry: McpRegistry, audit: AuditLog): void {
  router.on('mcp.register', mcpRegisterFrame, async (frame, { identity }) => {
    const names = frame.tools.map((t) => t.name);
    await registry.register(identity, frame.server, frame.description, frame.tools);
    audit.record({
      meshId: identity.meshId,
      eventType: 'mcp.registered',
      actor: identity.pubkey,
      payload: { server: frame.server, sessionId: identity.sessionId, tools: names },
    });
    return { type: 'mcp.registered', server: frame.server };
  });
  router.on('mcp.unregister', mcpUnregisterFrame, async (frame, { identity }) => {
    await registry.unregister(identity, frame.server);
    audit.record({
      meshId: identity.meshId,
      eventType: 'mcp.unregistered',
      actor: identity.pubkey,
      payload: { server: frame.server },
    });
    return { type: 'mcp.unregistered', server: frame.server };
  });
  // One bounded page (page.ts); without a cursor the first, which is the whole list of a small mesh.
  router.on('mcp.list', mcpListFrame, async (frame, { identity }) => ({
    type: 'mcp.list_result',
    ...(await registry.list(identity.meshId, pageRequest(frame))),
  }));
  // The answer comes later as mcp.call_result (with this rid); the socket is not held meanwhile.
  router.on('mcp.call', mcpCallFrame, async (frame, { identity, rid }) => {
    await registry.call(identity, { ...frame, rid });
    return undefined;
  });
  router.on('mcp.result', mcpResultFrame, async (frame, { identity }) => {
    await registry.result(identity, frame);
    return frame.rid === undefined ? undefined : { type: 'mcp.result_accepted', callId: frame.callId };
  });
}
