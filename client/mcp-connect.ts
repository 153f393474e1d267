/**
 * `connectMcp`: one MCP server (the official SDK's Server, over stdio by default) exposing every tool the
 * mesh hosts, as `<server>__<tool>` (mcp-names.ts), so that Claude Desktop, the MCP Inspector or any MCP
 * client can call them (docs/mcp.md § Connecting).
 *
 * - `tools/list` is one mesh `mcp.list` page per MCP page: the MCP cursor is the mesh's (`next`), so one
 *   answer is never larger than the broker's 64 KiB page.
 * - The mesh's servers are watched (a full listing every `pollMs`, and at once when a peer joins or leaves):
 *   when the exposed tools change, the MCP client gets `notifications/tools/list_changed`.
 * - `tools/call` is one `mcp.call`. Errors of the call (the host's, `timeout`, `host_left: …`,
 *   `unavailable: …`, a result too large) are tool results with `isError: true`, which an MCP client
 *   shows to its model; an unknown tool (not listed, or no longer hosted: `not_found`) and arguments over
 *   the frame bound are JSON-RPC errors (`InvalidParams`), as the MCP spec has it for protocol errors.
 */
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import type { Frame, McpCallResult, McpListResult, McpServer } from '../protocol/frames.js';
import { type MeshClient, MeshRequestError } from './client.js';
import { listMcpServers } from './lists.js';
import { fromExposedName, jsonBytes, MESH_BOUNDS, toExposedName } from './mcp-names.js';

export interface ConnectMcpOptions {
  /** A connected mesh client: the calling session. */
  client: MeshClient;
  /** The MCP side (default: stdin/stdout of this process). */
  transport?: Transport;
  /** How often the mesh's servers are listed to notice hosts coming and going (default 2 s). */
  pollMs?: number;
  /** How long a call may wait for its `mcp.call_result` (default 35 s: the broker's 30 s timeout and some). */
  callTimeoutMs?: number;
  /** The node's MAX_FRAME_BYTES (default 64 KiB): an `mcp.call` larger than that is refused here. */
  maxFrameBytes?: number;
  /** Where the bridge says what it does (default: stderr; never stdout, which may be the MCP channel). */
  log?: (line: string) => void;
}

export interface McpConnection {
  /** The MCP server (the official SDK's). */
  readonly server: Server;
  /** The exposed tool names as last listed. */
  tools(): string[];
  /** Settles when the MCP side closed (the client went) or `close()` was called. */
  readonly closed: Promise<void>;
  close(): Promise<void>;
}

/** A tool as exposed: where it lives on the mesh, and what MCP clients see. */
interface Exposed {
  server: string;
  tool: string;
  listed: Tool;
}

/** The most tools the catalog holds (the broker's per-mesh bound is 5000; local mode is per node). */
const MAX_CATALOG_TOOLS = 10_000;

export async function connectMcp(options: ConnectMcpOptions): Promise<McpConnection> {
  const connection = new Connection(options);
  await connection.start();
  return connection;
}

/** The exposed tools of one listing of servers (online ones only: a call to the others is refused). */
function exposedTools(servers: McpServer[], into = new Map<string, Exposed>()): Map<string, Exposed> {
  for (const server of servers) {
    if (!server.online) continue;
    for (const tool of server.tools) {
      const name = toExposedName(server.server, tool.name);
      // Two pairs that make one name (`a__b` + `c`, `a` + `b__c`): the first in name order keeps it.
      if (into.has(name) || into.size >= MAX_CATALOG_TOOLS) continue;
      const description = `${tool.description}${tool.description ? ' ' : ''}(mesh server "${server.server}")`;
      const inputSchema = { type: 'object', ...tool.inputSchema } as Tool['inputSchema'];
      into.set(name, { server: server.server, tool: tool.name, listed: { name, description, inputSchema } });
    }
  }
  return into;
}

class Connection implements McpConnection {
  readonly server = new Server(
    { name: 'mesh-broker', version: '0.1.0' },
    { capabilities: { tools: { listChanged: true } } },
  );
  readonly closed: Promise<void>;
  private catalog = new Map<string, Exposed>();
  private signature = '';
  private timer: ReturnType<typeof setInterval> | undefined;
  private polling: Promise<void> | undefined;
  private again = false;
  private soon: ReturnType<typeof setTimeout> | undefined;
  private readonly offs: Array<() => void> = [];
  private readonly log: (line: string) => void;
  private done!: () => void;
  private ended = false;

  constructor(private readonly options: ConnectMcpOptions) {
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.closed = new Promise((resolve) => {
      this.done = resolve;
    });
  }

  tools(): string[] {
    return [...this.catalog.keys()];
  }

  async start(): Promise<void> {
    this.server.setRequestHandler(ListToolsRequestSchema, (request) => this.listPage(request.params?.cursor));
    this.server.setRequestHandler(CallToolRequestSchema, (request) =>
      this.call(request.params.name, request.params.arguments ?? {}),
    );
    this.server.onclose = () => void this.close();
    await this.poll();
    const { client } = this.options;
    // A peer joining or leaving may be a host coming or going: look at once (coalesced), not only at the poll.
    for (const event of ['peer.joined', 'peer.left', 'welcome'] as const)
      this.offs.push(client.on(event, () => this.pollSoon()));
    this.offs.push(client.on('closed', () => void this.close()));
    this.timer = setInterval(() => this.pollSoon(), this.options.pollMs ?? 2000);
    await this.server.connect(this.options.transport ?? this.stdio());
    this.log(`exposing ${this.catalog.size} mesh tools over MCP`);
  }

  /** stdin/stdout; the SDK's transport does not notice stdin's end (the MCP client went), so this does. */
  private stdio(): Transport {
    const onEnd = () => void this.close();
    process.stdin.once('end', onEnd);
    this.offs.push(() => process.stdin.off('end', onEnd));
    return new StdioServerTransport();
  }

  async close(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    clearInterval(this.timer);
    clearTimeout(this.soon);
    for (const off of this.offs.splice(0)) off();
    await this.server.close().catch(() => {});
    this.done();
  }

  /** One MCP page: one mesh page (the MCP cursor is the mesh's `next`). */
  private async listPage(cursor: string | undefined): Promise<{ tools: Tool[]; nextCursor?: string }> {
    let page: McpListResult;
    try {
      page = await this.options.client.request<Frame & McpListResult>(
        cursor === undefined ? { type: 'mcp.list' } : { type: 'mcp.list', cursor },
      );
    } catch (error) {
      throw new McpError(
        ErrorCode.InternalError,
        `the mesh did not list its servers: ${(error as Error).message}`,
      );
    }
    const tools = [...exposedTools(page.servers).values()]
      .filter(({ server, tool, listed }) => this.owner(listed.name, server, tool))
      .map(({ listed }) => listed);
    return { tools, ...(page.next === undefined ? {} : { nextCursor: page.next }) };
  }

  /** Whether `name` means (server, tool) (not another pair that makes the same name, taken first). */
  private owner(name: string, server: string, tool: string): boolean {
    const known = this.catalog.get(name);
    return known === undefined || (known.server === server && known.tool === tool);
  }

  private async call(name: string, args: Record<string, unknown>): Promise<CallToolResult> {
    let target = this.catalog.get(name);
    if (!target && fromExposedName(name).length > 0) {
      await this.poll();
      target = this.catalog.get(name);
    }
    if (!target)
      throw new McpError(ErrorCode.InvalidParams, `unknown tool "${name}": no mesh host offers it`);
    const frame = { type: 'mcp.call', callId: randomUUID(), server: target.server, tool: target.tool, args };
    const max = this.options.maxFrameBytes ?? MESH_BOUNDS.frameBytes;
    const size = jsonBytes({ ...frame, rid: 'r0000000000' });
    if (size > max)
      throw new McpError(
        ErrorCode.InvalidParams,
        `the arguments are ${size} bytes of JSON; a mesh frame holds at most ${max}`,
      );
    try {
      const reply = await this.options.client.request<Frame & McpCallResult>(frame, {
        timeoutMs: this.options.callTimeoutMs ?? 35_000,
      });
      return reply.error !== undefined ? failed(reply.error) : asToolResult(reply.result);
    } catch (error) {
      if (error instanceof MeshRequestError && error.code === 'not_found') {
        this.pollSoon();
        throw new McpError(ErrorCode.InvalidParams, `unknown tool "${name}": ${error.message}`);
      }
      return failed((error as Error).message);
    }
  }

  /**
   * Lists the mesh's servers and notifies when the tools changed. One listing at a time: asked while one
   * runs, it runs once more after it (a change during a listing is not missed), never more.
   */
  private poll(): Promise<void> {
    if (this.polling) {
      this.again = true;
      return this.polling;
    }
    const run = async () => {
      do {
        this.again = false;
        await this.listAll();
      } while (this.again && !this.ended);
    };
    this.polling = run().finally(() => {
      this.polling = undefined;
    });
    return this.polling;
  }

  private pollSoon(): void {
    if (this.soon !== undefined || this.ended) return;
    this.soon = setTimeout(() => {
      this.soon = undefined;
      this.poll().catch((error: Error) => this.log(`listing the mesh's servers failed: ${error.message}`));
    }, 100);
  }

  private async listAll(): Promise<void> {
    const catalog = exposedTools(await listMcpServers(this.options.client));
    const signature = JSON.stringify([...catalog.values()].map((t) => t.listed));
    this.catalog = catalog;
    if (signature === this.signature) return;
    const first = this.signature === '';
    this.signature = signature;
    if (first) return;
    this.log(`the mesh's tools changed (${catalog.size} now): notifying the MCP client`);
    await this.server.sendToolListChanged().catch(() => {});
  }
}

/** An error of the call as a tool result: the MCP client (and its model) sees the reason. */
function failed(error: string): CallToolResult {
  return { content: [{ type: 'text', text: `mesh: ${error}` }], isError: true };
}

/** The host's answer: an MCP tool result as it is; anything else (a host not using the bridge) as text. */
function asToolResult(result: unknown): CallToolResult {
  if (typeof result === 'object' && result !== null && Array.isArray((result as CallToolResult).content))
    return result as CallToolResult;
  return { content: [{ type: 'text', text: JSON.stringify(result ?? null) }] };
}
