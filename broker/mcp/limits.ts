/**
 * The bounds on what one member and one mesh may register (issue 17): servers and tools, the same rule in
 * every implementation. Each implementation counts what the mesh holds (under its own lock) and asks
 * `assertWithinLimits` before it writes anything, so a refused registration changes nothing.
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { BrokerConfig } from '../config.js';

export interface McpLimits {
  serversPerMember: number;
  serversPerMesh: number;
  toolsPerMember: number;
  toolsPerMesh: number;
}

export function mcpLimitsOf(config: BrokerConfig): McpLimits {
  return {
    serversPerMember: config.mcpMaxServersPerMember,
    serversPerMesh: config.mcpMaxServersPerMesh,
    toolsPerMember: config.mcpMaxToolsPerMember,
    toolsPerMesh: config.mcpMaxToolsPerMesh,
  };
}

/**
 * What a mesh holds besides the server being registered (a registration that replaces its own entry does
 * not count that entry twice).
 */
export interface McpUsage {
  memberServers: number;
  meshServers: number;
  memberTools: number;
  meshTools: number;
}

/**
 * What a mesh's servers use besides `server` (a registration replaces it, so it is not counted twice): the
 * local registry's map values and the shadow copy's rows alike.
 */
export function usageOf(
  mesh: Iterable<{ server: string; host: string; tools: readonly unknown[] }>,
  member: string,
  server: string,
): McpUsage {
  const usage: McpUsage = { memberServers: 0, meshServers: 0, memberTools: 0, meshTools: 0 };
  for (const entry of mesh) {
    if (entry.server === server) continue;
    usage.meshServers += 1;
    usage.meshTools += entry.tools.length;
    if (entry.host !== member) continue;
    usage.memberServers += 1;
    usage.memberTools += entry.tools.length;
  }
  return usage;
}

/** Throws `limit_exceeded` when adding one server with `tools` tools to `usage` would pass a bound. */
export function assertWithinLimits(usage: McpUsage, tools: number, limits: McpLimits): void {
  const over = (used: number, adding: number, max: number) => used + adding > max;
  if (over(usage.memberServers, 1, limits.serversPerMember))
    refuse(`a member may host at most ${limits.serversPerMember} MCP servers`);
  if (over(usage.meshServers, 1, limits.serversPerMesh))
    refuse(`a mesh may hold at most ${limits.serversPerMesh} MCP servers`);
  if (over(usage.memberTools, tools, limits.toolsPerMember))
    refuse(`a member's MCP servers may have at most ${limits.toolsPerMember} tools together`);
  if (over(usage.meshTools, tools, limits.toolsPerMesh))
    refuse(`a mesh's MCP servers may have at most ${limits.toolsPerMesh} tools together`);
}

function refuse(message: string): never {
  throw new ProtocolError('limit_exceeded', message);
}
