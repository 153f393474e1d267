/**
 * Which of an MCP server's tools a host registers on the mesh (docs/mcp.md § What a host registers): the
 * broker takes at most 100 tools per server and an entry of at most 60 KiB as listed, with names of 1–64
 * of `A-Z a-z 0-9 _ . -` and descriptions of at most 2000 characters. A registration past those would be
 * refused whole, so the host registers what fits and says what it left out and why.
 */
import type { McpTool } from '../protocol/frames.js';
import { clip, jsonBytes, MESH_BOUNDS, MESH_NAME } from './mcp-names.js';

/** A tool of the MCP server that is not on the mesh, and why. */
export interface LeftOutTool {
  name: string;
  reason: string;
}

/** A tool as an MCP server lists it (the fields the mesh carries; others are dropped). */
export interface ListedTool {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
}

/** Room for the parts of the listed entry besides the tools (server, description, host, online). */
const ENTRY_ENVELOPE_BYTES = 512;

export function selectTools(
  listed: ListedTool[],
  description: string,
): { tools: McpTool[]; leftOut: LeftOutTool[] } {
  const tools: McpTool[] = [];
  const leftOut: LeftOutTool[] = [];
  const names = new Set<string>();
  let bytes = ENTRY_ENVELOPE_BYTES + jsonBytes(description);
  for (const tool of listed) {
    const entry: McpTool = {
      name: tool.name,
      description: clip(tool.description ?? '', MESH_BOUNDS.descriptionChars),
      inputSchema: tool.inputSchema ?? {},
    };
    const size = jsonBytes(entry) + 1;
    const reason = !MESH_NAME.test(tool.name)
      ? 'not a mesh tool name (1-64 of A-Z a-z 0-9 _ . -)'
      : names.has(tool.name)
        ? 'listed twice by the server'
        : tools.length >= MESH_BOUNDS.toolsPerServer
          ? `the mesh takes at most ${MESH_BOUNDS.toolsPerServer} tools per server`
          : bytes + size > MESH_BOUNDS.entryBytes
            ? `the server's entry would pass ${MESH_BOUNDS.entryBytes} bytes of JSON with it (${size} bytes)`
            : undefined;
    if (reason !== undefined) {
      leftOut.push({ name: tool.name, reason });
      continue;
    }
    names.add(tool.name);
    tools.push(entry);
    bytes += size;
  }
  return { tools, leftOut };
}
