/**
 * `client.mcp` (docs/protocol.md § MCP tools hosted by peers): host an MCP server's tools on the mesh with
 * a handler, and call any hosted tool. A hosted server is registered again after every welcome (the same
 * session registering again replaces its entry), so a host that lands on another node keeps serving.
 */
import { randomUUID } from 'node:crypto';
import type { Frame, McpCallResult, McpInvoke, McpTool } from '../protocol/frames.js';
import { MeshRequestError } from './errors.js';
import { clip, jsonBytes, MESH_BOUNDS } from './mcp-names.js';
import type { Session } from './session.js';

/** A tool as registered: `description` and `inputSchema` are optional on the wire. */
export type McpToolSpec = Pick<McpTool, 'name'> & Partial<Omit<McpTool, 'name'>>;

/** What a handler learns about the call it answers. */
export interface McpInvocation {
  server: string;
  tool: string;
  callId: string;
  /** The caller's pubkey. */
  caller: string;
}

/** Answers a call: its return value is the result; a throw is the call's `error` (its message). */
export type McpHandler = (args: unknown, call: McpInvocation) => unknown;

/** A server this client hosts. */
export interface McpHosted {
  readonly server: string;
  /** Stops hosting: the broker unregisters the server, calls to it are `not_found`. */
  unregister(options?: { signal?: AbortSignal }): Promise<void>;
}

/**
 * A call that ended with the call's `error`: `code` is `timeout`, `host_left`, `unavailable` (the broker
 * said so) or `tool_error` (the host's own error); `message` has the full text.
 */
export class MeshMcpError extends MeshRequestError {
  constructor(readonly error: string) {
    const prefix = /^(timeout|host_left|unavailable)\b/.exec(error)?.[1];
    super(prefix ?? 'tool_error', error);
    this.name = 'MeshMcpError';
  }
}

interface Hosting {
  register: Frame;
  handler: McpHandler;
  sentAt: number;
  maxResultBytes: number;
}

export class McpApi {
  private readonly hosted = new Map<string, Hosting>();

  constructor(private readonly client: Session) {
    client.on('welcome', () => {
      for (const hosting of this.hosted.values()) this.registerAgain(hosting);
    });
    client.on('frame', (frame) => {
      if (frame.type === 'mcp.invoke') void this.answer(frame as unknown as McpInvoke);
    });
  }

  /**
   * Registers `server` with `tools` and answers their calls with `handler`; resolves once registered.
   * Hosting a server again replaces its tools and handler. A result whose `mcp.result` frame would pass
   * `maxResultBytes` (default the node's 64 KiB frame bound, over which the node would close this socket)
   * is answered `too_large` with its size instead.
   */
  async host(
    server: string,
    tools: McpToolSpec[],
    handler: McpHandler,
    options: { description?: string; signal?: AbortSignal; maxResultBytes?: number } = {},
  ): Promise<McpHosted> {
    const register: Frame = {
      type: 'mcp.register',
      server,
      tools,
      ...(options.description === undefined ? {} : { description: options.description }),
    };
    await this.client.request(register, { signal: options.signal });
    this.hosted.set(server, {
      register,
      handler,
      sentAt: this.client.welcomes,
      maxResultBytes: options.maxResultBytes ?? MESH_BOUNDS.frameBytes,
    });
    return {
      server,
      unregister: async (unregisterOptions = {}) => {
        if (!this.hosted.delete(server)) return;
        await this.client.request({ type: 'mcp.unregister', server }, unregisterOptions);
      },
    };
  }

  /**
   * Calls `tool` of `server` with `args`; resolves with its result. Rejects with MeshRequestError for a
   * refusal (`not_found`, `unavailable`), MeshMcpError for the call's `error`, `timeout` after
   * `timeoutMs` (default 35 s, past the broker's own 30 s), `aborted` on the signal.
   */
  async call(
    server: string,
    tool: string,
    args?: unknown,
    options: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<unknown> {
    const frame: Frame = { type: 'mcp.call', callId: randomUUID(), server, tool };
    if (args !== undefined) frame.args = args;
    const reply = await this.client.request<McpCallResult & Frame>(frame, {
      signal: options.signal,
      timeoutMs: options.timeoutMs ?? 35_000,
    });
    if (typeof reply.error === 'string') throw new MeshMcpError(reply.error);
    return reply.result;
  }

  /** The servers this client hosts. */
  servers(): string[] {
    return [...this.hosted.keys()];
  }

  private registerAgain(hosting: Hosting): void {
    if (hosting.sentAt === this.client.welcomes) return;
    hosting.sentAt = this.client.welcomes;
    // Nothing waits on it: a refusal now (e.g. the name taken meanwhile) is the client's `error`.
    this.client.request(hosting.register).catch(() => {});
  }

  private async answer(invoke: McpInvoke): Promise<void> {
    const hosting = this.hosted.get(invoke.server);
    if (!hosting) return; // someone else's handler (a raw `frame` listener) may answer it
    const call = { server: invoke.server, tool: invoke.tool, callId: invoke.callId, caller: invoke.caller };
    let reply: Frame;
    try {
      const result = await hosting.handler(invoke.args, call);
      reply = { type: 'mcp.result', callId: invoke.callId, result: result ?? null };
    } catch (error) {
      const message = (error as Error)?.message ?? String(error);
      reply = { type: 'mcp.result', callId: invoke.callId, error: clip(message, MESH_BOUNDS.errorChars) };
    }
    const size = jsonBytes(reply);
    if (size > hosting.maxResultBytes) {
      const error = `too_large: the tool's result is ${size} bytes of JSON; a mesh frame holds at most ${hosting.maxResultBytes}`;
      reply = { type: 'mcp.result', callId: invoke.callId, error };
    }
    this.client.write(reply);
  }
}
