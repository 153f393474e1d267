/**
 * `hostMcpServer`: a real stdio MCP server hosted on the mesh (docs/mcp.md § Hosting). The official SDK's
 * Client speaks to the child over StdioClientTransport; the bridge registers the child's tools under one
 * mesh server name through `client.mcp.host` (which answers each `mcp.invoke`, keeps results within the
 * frame bound and registers again after every welcome), calls the child's tool for each invocation,
 * registers again when the child says its tools changed, and unregisters when the child exits.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import type { MeshClient } from './client.js';
import type { McpHosted } from './mcp.js';
import { clip, MESH_BOUNDS, MESH_NAME, meshServerName } from './mcp-names.js';
import { type LeftOutTool, type ListedTool, selectTools } from './mcp-tools.js';

export type { LeftOutTool } from './mcp-tools.js';

export interface HostMcpOptions {
  /** A connected mesh client: the host session. */
  client: MeshClient;
  /** The MCP server's command and arguments (spawned, spoken to over stdin/stdout). */
  command: string;
  args?: string[];
  /** The child's environment (default: the MCP SDK's safe default, HOME, PATH, USER…) and folder. */
  env?: Record<string, string>;
  cwd?: string;
  /** The child's stderr (default `inherit`: it shows on this process's stderr). */
  stderr?: 'inherit' | 'pipe' | 'ignore';
  /** The mesh server name (default: the MCP server's own name, made a mesh name). */
  server?: string;
  /** How long one tool call may take before the host answers an error (default 60 s). */
  callTimeoutMs?: number;
  /** The node's MAX_FRAME_BYTES (default 64 KiB): a larger result is answered with `too_large`. */
  maxFrameBytes?: number;
  /** Where the bridge says what it does (default: stderr). */
  log?: (line: string) => void;
}

/** Why hosting ended. */
export interface HostEnded {
  /** `closed`: `close()` was called; `server-exited`: the child went; `mesh-closed`: the session did. */
  reason: 'closed' | 'server-exited' | 'mesh-closed';
  detail: string;
}

export interface McpHost {
  /** The mesh server name the tools are hosted under. */
  readonly server: string;
  /** The tool names registered now. */
  readonly tools: string[];
  /** What the last registration left out, and why. */
  readonly leftOut: LeftOutTool[];
  /** Settles once hosting ended (the servers are unregistered by then). */
  readonly ended: Promise<HostEnded>;
  /** Unregisters, stops the child. */
  close(): Promise<void>;
}

/** The most tools read from one server (pages after that are not asked for): a bound on a bad child. */
const MAX_LISTED_TOOLS = 1000;

export async function hostMcpServer(options: HostMcpOptions): Promise<McpHost> {
  const host = new Host(options);
  await host.start();
  return host;
}

class Host implements McpHost {
  server = '';
  tools: string[] = [];
  leftOut: LeftOutTool[] = [];
  readonly ended: Promise<HostEnded>;
  private end!: (ended: HostEnded) => void;
  private readonly mcp = new Client({ name: 'mesh-broker-host', version: '0.1.0' });
  private readonly transport: StdioClientTransport;
  private readonly log: (line: string) => void;
  private readonly offs: Array<() => void> = [];
  /** The registration through `client.mcp`, which answers the calls and registers again after a welcome. */
  private hosting: McpHosted | undefined;
  private stopping = false;
  private queued: Promise<void> | undefined;
  private running: Promise<void> = Promise.resolve();

  constructor(private readonly options: HostMcpOptions) {
    this.ended = new Promise((resolve) => {
      this.end = resolve;
    });
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.transport = new StdioClientTransport({
      command: options.command,
      args: options.args ?? [],
      ...(options.env ? { env: options.env } : {}),
      ...(options.cwd ? { cwd: options.cwd } : {}),
      stderr: options.stderr ?? 'inherit',
    });
  }

  async start(): Promise<void> {
    const { client } = this.options;
    this.mcp.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      this.log('the MCP server says its tools changed: registering them again');
      this.refresh().catch((error: Error) => this.log(`registering again failed: ${error.message}`));
    });
    await this.mcp.connect(this.transport);
    this.mcp.onclose = () => void this.finish('server-exited', 'the MCP server exited');
    const named = this.options.server ?? meshServerName(this.mcp.getServerVersion()?.name ?? '');
    if (!MESH_NAME.test(named)) {
      await this.mcp.close();
      throw new Error(`"${named}" is not a mesh server name (1-64 of A-Z a-z 0-9 _ . -)`);
    }
    this.server = named;
    this.offs.push(
      client.on('closed', ({ code, reason }) => {
        void this.finish('mesh-closed', `the mesh session ended (${code} ${reason})`);
      }),
    );
    try {
      await this.refresh();
    } catch (error) {
      await this.finish('closed', (error as Error).message);
      throw error;
    }
  }

  async close(): Promise<void> {
    await this.finish('closed', 'closed');
  }

  /** One registration at a time; a change while one runs queues one more (not one per notification). */
  private refresh(): Promise<void> {
    if (this.queued) return this.queued;
    const next = this.running.then(() => {
      this.queued = undefined;
      return this.register();
    });
    this.queued = next;
    this.running = next.catch(() => {});
    return next;
  }

  private async register(): Promise<void> {
    if (this.stopping) return;
    const version = this.mcp.getServerVersion();
    const description = clip(
      version?.title ?? `${version?.name ?? 'MCP server'} ${version?.version ?? ''}`.trim(),
      MESH_BOUNDS.descriptionChars,
    );
    const { listed, more } = await this.listTools();
    const { tools, leftOut } = selectTools(listed, description);
    if (more) leftOut.push({ name: '…', reason: `the server lists more than ${MAX_LISTED_TOOLS} tools` });
    this.hosting = await this.options.client.mcp.host(
      this.server,
      tools,
      (args, call) => this.invoke(call.tool, args),
      { description, maxResultBytes: this.options.maxFrameBytes ?? MESH_BOUNDS.frameBytes },
    );
    this.tools = tools.map((t) => t.name);
    this.leftOut = leftOut;
    this.log(`hosting ${tools.length} tools as mesh server "${this.server}"`);
    for (const left of leftOut) this.log(`left out tool "${left.name}": ${left.reason}`);
  }

  /** Every page of the child's tools/list, up to MAX_LISTED_TOOLS. */
  private async listTools(): Promise<{ listed: ListedTool[]; more: boolean }> {
    const listed: ListedTool[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.mcp.listTools(cursor === undefined ? {} : { cursor });
      listed.push(...(page.tools as ListedTool[]));
      cursor = page.nextCursor;
    } while (cursor !== undefined && listed.length < MAX_LISTED_TOOLS);
    return { listed: listed.slice(0, MAX_LISTED_TOOLS), more: listed.length > MAX_LISTED_TOOLS || !!cursor };
  }

  private async invoke(tool: string, args: unknown): Promise<unknown> {
    if (!this.tools.includes(tool))
      throw new Error(`not_found: "${tool}" is not a tool of "${this.server}" now`);
    if (typeof args !== 'object' || args === null || Array.isArray(args))
      throw new Error('invalid_args: the arguments of an MCP tool are a JSON object');
    return this.mcp.callTool({ name: tool, arguments: args as Record<string, unknown> }, undefined, {
      timeout: this.options.callTimeoutMs ?? 60_000,
    });
  }

  /** Ends hosting once: unregisters (while the session lasts), stops the child, settles `ended`. */
  private async finish(reason: HostEnded['reason'], detail: string): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    for (const off of this.offs.splice(0)) off();
    if (reason !== 'mesh-closed') {
      await this.hosting?.unregister({ signal: AbortSignal.timeout(5000) }).catch(() => {});
    }
    if (reason !== 'server-exited') await this.mcp.close().catch(() => {});
    this.log(`stopped hosting "${this.server}": ${detail}`);
    this.end({ reason, detail });
  }
}
