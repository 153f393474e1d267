/**
 * `@mesh-broker/sdk/mcp`: real MCP servers and clients on the mesh (issue 28 item 5, docs/mcp.md), with the
 * official `@modelcontextprotocol/sdk` on both sides.
 *
 * - `hostMcpServer`: spawns a stdio MCP server, registers its tools on the mesh (`mcp.register`) and
 *   answers the mesh's `mcp.invoke` by calling them (`mcp-host.ts`).
 * - `connectMcp`: an MCP server (stdio by default) exposing every tool the mesh hosts as
 *   `<server>__<tool>` (`mcp-connect.ts`).
 *
 * Node only (it spawns processes and speaks stdio); the browser build does not include it.
 */
export { type ConnectMcpOptions, connectMcp, type McpConnection } from './mcp-connect.js';
export { type HostMcpOptions, hostMcpServer, type LeftOutTool, type McpHost } from './mcp-host.js';
export { fromExposedName, MCP_NAME_SEPARATOR, toExposedName } from './mcp-names.js';
