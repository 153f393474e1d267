/**
 * One page of `mcp.list` (docs/protocol.md § MCP tools hosted by peers), bounded by construction: at
 * most the page's server count and LIST_PAGE_MAX_BYTES of JSON (broker/paging.ts). A mesh of 300 servers
 * of 55 KiB once made one 16 MiB reply per request, buffered whole on the socket (issue 17); a page is
 * built entry by entry from a lazy source, and stops before the entry that would pass the budget, so no reply larger than the budget
 * is ever built, and no more than one entry past the page is ever read.
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { McpServer } from '../../protocol/frames.js';
import { MCP_LIST_MAX_SERVERS } from '../../protocol/requests.js';
import { BytePage, entryBytes } from '../paging.js';
// The page's request and result are the registry contract's (mcp.ts), which this file builds.
import type { McpListPage, McpPageRequest, McpServerEntry } from './mcp.js';

/**
 * The largest entry a server may have as listed: a registration above it is `too_large`. It fits an empty
 * page (with the envelope), so every page holds at least one server and paging always moves on. A
 * registration frame is at most MAX_FRAME_BYTES (64 KiB by default), so at the default this rarely binds.
 */
export const MCP_SERVER_MAX_BYTES = 60 * 1024;

/** The order of pages: plain code-unit order of names (ASCII by the name rule), the same in SQL ("C"). */
export function byName(a: { server: string }, b: { server: string }): number {
  return a.server < b.server ? -1 : a.server > b.server ? 1 : 0;
}

/** The entry as `mcp.list_result` shows it (the host's session stays inside the broker). */
export function listed({ hostSession: _hostSession, ...server }: McpServerEntry): McpServer {
  return server;
}

export function pageRequest(frame: { cursor?: string; limit?: number }): McpPageRequest {
  return { after: frame.cursor, limit: Math.min(frame.limit ?? MCP_LIST_MAX_SERVERS, MCP_LIST_MAX_SERVERS) };
}

/**
 * Fills one page from `source`: entries in name order after the request's cursor. Stops at the page's
 * count, or before an entry that would pass the byte budget; `next` is set when an entry was left over.
 */
export async function fillPage(
  source: AsyncIterable<McpServerEntry> | Iterable<McpServerEntry>,
  request: McpPageRequest,
): Promise<McpListPage> {
  const page = new BytePage<McpServer>(request.limit);
  for await (const entry of source) {
    const server = listed(entry);
    const size = entryBytes(server);
    // Not registrable by this version (an older node's row): it could not fit a page of its own.
    if (size > MCP_SERVER_MAX_BYTES) continue;
    // An entry of at most MCP_SERVER_MAX_BYTES fits an empty page, so a full page is never empty.
    if (!page.offer(server, size)) return { servers: page.entries, next: page.entries.at(-1)!.server };
  }
  return { servers: page.entries };
}

/** A registration whose entry could not fit a page is `too_large` (checked before anything is written). */
export function assertListable(server: McpServer): void {
  const size = entryBytes(server);
  if (size > MCP_SERVER_MAX_BYTES)
    throw new ProtocolError(
      'too_large',
      `server "${server.server}" would list as ${size} bytes of JSON; at most ${MCP_SERVER_MAX_BYTES}`,
    );
}
