/**
 * The SDK's paged lists (docs/protocol.md § MCP tools hosted by peers, § Streams): the broker answers
 * `mcp.list` and `stream.list` one bounded page at a time, with `next` while more follow. These follow the
 * pages to the end; a peer that wants one page at a time sends the request itself with `cursor`.
 */
import type { Frame, McpListResult, McpServer, StreamInfo, StreamListResult } from '../protocol/frames.js';
import type { MeshClient } from './client.js';

/** `signal` aborts the walk (the page in flight rejects with `aborted`). */
export interface ListOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** Every MCP server of the mesh, in name order, page after page. */
export async function listMcpServers(client: MeshClient, options: ListOptions = {}): Promise<McpServer[]> {
  const pages = followPages(client, 'mcp.list', (page: Frame & McpListResult) => page.servers, options);
  return collectPages(pages);
}

/** Every stream of the mesh with its subscriber count, in name order, page after page. */
export async function listStreams(client: MeshClient, options: ListOptions = {}): Promise<StreamInfo[]> {
  const pages = followPages(client, 'stream.list', (page: Frame & StreamListResult) => page.streams, options);
  return collectPages(pages);
}

async function* followPages<P extends Frame & { next?: string }, T>(
  client: MeshClient,
  type: string,
  itemsOf: (page: P) => T[],
  options: ListOptions,
): AsyncGenerator<T[]> {
  let cursor: string | undefined;
  for (;;) {
    const page = await client.request<P>(cursor === undefined ? { type } : { type, cursor }, options);
    yield itemsOf(page);
    // Names come in increasing order: a cursor that does not move on would page forever.
    if (page.next === undefined || (cursor !== undefined && page.next <= cursor)) return;
    cursor = page.next;
  }
}

async function collectPages<T>(pages: AsyncIterable<T[]>): Promise<T[]> {
  const items: T[] = [];
  for await (const page of pages) items.push(...page);
  return items;
}
