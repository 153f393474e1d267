/**
 * MCP tools hosted by peers (docs/design.md §2, row "mcpRegistry + call resolvers").
 *
 * Contract:
 * - A server name is unique in a mesh; only its host session may unregister it or answer its calls.
 * - `call` forwards `mcp.invoke` to the host with a broker-made callId; the caller gets exactly one
 *   `mcp.call_result` for its own callId: the host's result, `error: "timeout"` after the call timeout,
 *   or a `host_left` error at once when the host's socket goes away.
 * - A server goes offline with its host's socket and disappears when the host's session ends, or at once
 *   for everyone when its host member is revoked (whether or not the host's socket is still open).
 * - A member and a mesh hold at most the configured servers and tools (limits.ts): one more is
 *   `limit_exceeded` and changes nothing, counted cluster-wide where the registry is.
 * - `list` answers one page in name order, bounded by construction (page.ts).
 * - Frames reach sockets through the `McpSink` the node registered.
 */

import { ProtocolError } from '../../protocol/errors.js';
import type { McpCallResult, McpServer, McpTool } from '../../protocol/frames.js';
import type { SessionIdentity } from '../connections/connection.js';
import type { Lifecycle } from '../rows/lifecycle.js';

export type { McpTool };

/** A server as `mcp.list_result` lists it, with the session hosting it. */
export interface McpServerEntry extends McpServer {
  hostSession: string;
}

/** One `mcp.list` request, as page.ts reads it from the frame. */
export interface McpPageRequest {
  /** List servers whose name comes after this one (the previous page's `next`). */
  after: string | undefined;
  /** At most this many servers (≤ MCP_LIST_MAX_SERVERS). */
  limit: number;
}

/** One page of `mcp.list`, bounded by page.ts's `fillPage`. */
export interface McpListPage {
  servers: McpServer[];
  /** The cursor of the next page; absent on the last page. */
  next?: string;
}

export interface McpCall {
  callId: string;
  server: string;
  tool: string;
  args: unknown;
  /** The caller's request rid, echoed on its `mcp.call_result`. */
  rid: string | undefined;
}

export interface McpResult {
  callId: string;
  result?: unknown;
  error?: string;
}

/** The checks of a call against the server it names, the same in every implementation. */
export function assertCallable(
  entry: Pick<McpServerEntry, 'tools' | 'online'> | undefined,
  call: Pick<McpCall, 'server' | 'tool'>,
): asserts entry is Pick<McpServerEntry, 'tools' | 'online'> {
  if (!entry) throw new ProtocolError('not_found', `no server "${call.server}" in this mesh`);
  if (!entry.tools.some((tool) => tool.name === call.tool)) {
    throw new ProtocolError('not_found', `server "${call.server}" has no tool "${call.tool}"`);
  }
  if (!entry.online) throw new ProtocolError('unavailable', `the host of "${call.server}" is offline`);
}

/** The one answer a caller gets for its call: its own callId and its request's rid. */
export function callResultFrame(
  call: { callerCallId: string; rid: string | undefined },
  outcome: { result?: unknown; error?: string },
): McpCallResult {
  return {
    type: 'mcp.call_result',
    callId: call.callerCallId,
    ...outcome,
    ...(call.rid === undefined ? {} : { rid: call.rid }),
  };
}

/** The answer of a call still pending when its node stops routing calls (a flip of `ha.mcp`, a drain). */
export const STOPPED_ROUTING = 'unavailable: this node stopped routing MCP calls (a flag flip or a shutdown)';

/** How a call ended for its caller (the `outcome` label of mesh_broker_mcp_calls_total). */
export type CallOutcome = 'result' | 'error' | 'timeout';

export function outcomeOf(outcome: { error?: string }): CallOutcome {
  if (outcome.error === undefined) return 'result';
  return outcome.error === 'timeout' ? 'timeout' : 'error';
}

/** Which of these pubkeys are revoked members of the mesh (the directory in Postgres is the truth). */
export type RevokedAmong = (meshId: string, pubkeys: string[]) => Promise<Set<string>>;

/** This node's sockets, as the MCP registry reaches them. */
export interface McpSink {
  send(sessionId: string, frame: object): void;
  /** Whether the session has a socket on this node. */
  reaches(sessionId: string): boolean;
  /** A call made through this node got its one answer. */
  callEnded(outcome: CallOutcome): void;
}

export interface McpRegistry extends Lifecycle {
  register(host: SessionIdentity, server: string, description: string, tools: McpTool[]): Promise<void>;
  unregister(host: SessionIdentity, server: string): Promise<void>;
  /** One page of the mesh's servers whose host is not revoked (page.ts). */
  list(meshId: string, page: McpPageRequest): Promise<McpListPage>;
  call(caller: SessionIdentity, call: McpCall): Promise<void>;
  result(host: SessionIdentity, result: McpResult): Promise<void>;
  /** The session's socket closed: its servers go offline and calls waiting on it fail now. */
  hostDisconnected(session: SessionIdentity): Promise<void>;
  /** A session reattached: its servers are online again. */
  hostReconnected(session: SessionIdentity): Promise<void>;
  /** The session left for good: its servers are removed. */
  sessionEnded(meshId: string, sessionId: string): Promise<void>;
}
