/**
 * Names and bounds shared by both sides of the MCP bridge (docs/mcp.md).
 *
 * The mesh names servers and tools with 1–64 of `A-Z a-z 0-9 _ . -`
 * (docs/protocol.md § MCP tools hosted by peers). An MCP client sees one flat list of tools, so the bridge exposes mesh tool T of server S as
 * `S__T`: two hosts may both have an `echo`, and the prefix says whose it is. `__` because MCP tool names
 * allow only `A-Z a-z 0-9 _ . -` too (no `/` or `:`), and a double underscore is what other MCP gateways
 * use and rarely appears in a server name. A server name may contain `__` itself, so a name is never split
 * back by parsing alone: the connect side keeps the table it listed (`mcp-connect.ts`).
 */

export const MCP_NAME_SEPARATOR = '__';

/** A valid mesh server or tool name (protocol/requests.ts `mcpName`). */
export const MESH_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * The broker's bounds the bridge keeps to, so the node never refuses (or closes the socket over) what the
 * bridge sends: the default MAX_FRAME_BYTES (a larger frame closes the connection, 1009), the most tools in
 * one `mcp.register`, the largest entry as listed (broker/mcp/page.ts MCP_SERVER_MAX_BYTES), the longest
 * description and the longest `mcp.result` error (protocol/requests.ts).
 */
export const MESH_BOUNDS = {
  frameBytes: 64 * 1024,
  toolsPerServer: 100,
  entryBytes: 60 * 1024,
  descriptionChars: 2000,
  errorChars: 4000,
} as const;

/** The name an MCP client sees for `tool` of mesh server `server`. */
export function toExposedName(server: string, tool: string): string {
  return `${server}${MCP_NAME_SEPARATOR}${tool}`;
}

/**
 * Every way `name` splits into a valid (server, tool) pair at a `__`; the connect side takes the one its
 * listing knows.
 */
export function fromExposedName(name: string): Array<{ server: string; tool: string }> {
  const pairs: Array<{ server: string; tool: string }> = [];
  for (let at = name.indexOf(MCP_NAME_SEPARATOR); at !== -1; at = name.indexOf(MCP_NAME_SEPARATOR, at + 1)) {
    const server = name.slice(0, at);
    const tool = name.slice(at + MCP_NAME_SEPARATOR.length);
    if (MESH_NAME.test(server) && MESH_NAME.test(tool)) pairs.push({ server, tool });
  }
  return pairs;
}

/** A mesh server name made of any text (an MCP server's own name, `mcp-servers/everything`). */
export function meshServerName(text: string): string {
  const name = text
    .replace(/[^A-Za-z0-9_.-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 64);
  return name === '' ? 'mcp' : name;
}

/** UTF-8 bytes of `value` as JSON: what it weighs in a frame. */
export function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value) ?? '', 'utf8');
}

/** `text` cut to `max` characters, saying it was cut. */
export function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 15)}… (truncated)`;
}
