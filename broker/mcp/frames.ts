import { z } from 'zod';
import type { AuditLog } from '../audit/audit.js';
import { rid } from '../protocol/frames.js';
import type { Router } from '../ws/router.js';
import type { McpRegistry } from './mcp.js';

const name = z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1-64 letters, digits, "_", "." or "-"');
const tool = z.object({
  name,
  description: z.string().max(2000).default(''),
  inputSchema: z.record(z.string(), z.unknown()).default({}),
});
const registerFrame = z.object({
  type: z.literal('mcp.register'),
  server: name,
  description: z.string().max(2000).default(''),
  tools: z.array(tool).max(100),
  rid,
});
const unregisterFrame = z.object({ type: z.literal('mcp.unregister'), server: name, rid });
const listFrame = z.object({ type: z.literal('mcp.list'), rid });
const callFrame = z.object({
  type: z.literal('mcp.call'),
  callId: z.string().min(1).max(128),
  server: name,
  tool: name,
  args: z.unknown().default({}),
  rid,
});
const resultFrame = z.object({
  type: z.literal('mcp.result'),
  callId: z.string().min(1).max(128),
  result: z.unknown().optional(),
  error: z.string().max(4000).optional(),
  rid,
});

/** The MCP frames (PROTOCOL.md § MCP tools hosted by peers). */
export function registerMcpFrames(router: Router, registry: McpRegistry, audit: AuditLog): void {
  router.on('mcp.register', registerFrame, async (frame, { identity }) => {
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
  router.on('mcp.unregister', unregisterFrame, async (frame, { identity }) => {
    await registry.unregister(identity, frame.server);
    audit.record({
      meshId: identity.meshId,
      eventType: 'mcp.unregistered',
      actor: identity.pubkey,
      payload: { server: frame.server },
    });
    return { type: 'mcp.unregistered', server: frame.server };
  });
  router.on('mcp.list', listFrame, async (_frame, { identity }) => ({
    type: 'mcp.list_result',
    servers: (await registry.list(identity.meshId)).map(({ hostSession: _hostSession, ...entry }) => entry),
  }));
  // The answer comes later as mcp.call_result (with this rid); the socket is not held meanwhile.
  router.on('mcp.call', callFrame, async (frame, { identity, rid }) => {
    await registry.call(identity, { ...frame, rid });
    return undefined;
  });
  router.on('mcp.result', resultFrame, async (frame, { identity }) => {
    await registry.result(identity, frame);
    return frame.rid === undefined ? undefined : { type: 'mcp.result_accepted', callId: frame.callId };
  });
}
