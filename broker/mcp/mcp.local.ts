import { randomUUID } from 'node:crypto';
import { ProtocolError } from '../../protocol/errors.js';
import type { SessionIdentity } from '../connections/connection.js';
import {
  assertCallable,
  callResultFrame,
  type McpCall,
  type McpRegistry,
  type McpResult,
  type McpServerEntry,
  type McpSink,
  type McpTool,
  outcomeOf,
  STOPPED_ROUTING,
} from './mcp.js';

interface PendingCall {
  callerSession: string;
  callerCallId: string;
  rid: string | undefined;
  hostSession: string;
  server: string;
  timer: NodeJS.Timeout;
}

/**
 * Registry and pending calls in this node's memory. The gap on 2+ nodes: a call made on another node
 * finds no server (`not_found`), and a host's servers are invisible to other nodes' `mcp.list`.
 */
export class LocalMcpRegistry implements McpRegistry {
  /** meshId → server name → entry */
  private readonly servers = new Map<string, Map<string, McpServerEntry>>();
  /** broker-made invoke id → pending call */
  private readonly pending = new Map<string, PendingCall>();

  constructor(
    private readonly sink: McpSink,
    private readonly callTimeoutMs: number,
  ) {}

  async register(
    host: SessionIdentity,
    server: string,
    description: string,
    tools: McpTool[],
  ): Promise<void> {
    let mesh = this.servers.get(host.meshId);
    if (!mesh) {
      mesh = new Map();
      this.servers.set(host.meshId, mesh);
    }
    const existing = mesh.get(server);
    if (existing && existing.hostSession !== host.sessionId) {
      throw new ProtocolError('conflict', `server "${server}" is already hosted by another session`);
    }
    mesh.set(server, {
      server,
      description,
      host: host.pubkey,
      hostSession: host.sessionId,
      tools,
      online: true,
    });
  }

  async unregister(host: SessionIdentity, server: string): Promise<void> {
    const entry = this.servers.get(host.meshId)?.get(server);
    if (!entry) throw new ProtocolError('not_found', `no server "${server}" in this mesh`);
    if (entry.hostSession !== host.sessionId)
      throw new ProtocolError('forbidden', 'only the host may unregister a server');
    this.servers.get(host.meshId)?.delete(server);
    this.failCalls(
      (call) => call.hostSession === host.sessionId && call.server === server,
      'host_left: server unregistered',
    );
  }

  async list(meshId: string): Promise<McpServerEntry[]> {
    return [...(this.servers.get(meshId)?.values() ?? [])].sort((a, b) => a.server.localeCompare(b.server));
  }

  async call(caller: SessionIdentity, call: McpCall): Promise<void> {
    const entry = this.servers.get(caller.meshId)?.get(call.server);
    assertCallable(entry, call);
    const invokeId = randomUUID();
    const timer = setTimeout(() => this.finish(invokeId, { error: 'timeout' }), this.callTimeoutMs);
    timer.unref();
    this.pending.set(invokeId, {
      callerSession: caller.sessionId,
      callerCallId: call.callId,
      rid: call.rid,
      hostSession: entry.hostSession,
      server: call.server,
      timer,
    });
    this.sink.send(entry.hostSession, {
      type: 'mcp.invoke',
      callId: invokeId,
      server: call.server,
      tool: call.tool,
      args: call.args,
      caller: caller.pubkey,
    });
  }

  async result(host: SessionIdentity, result: McpResult): Promise<void> {
    const call = this.pending.get(result.callId);
    if (!call) throw new ProtocolError('not_found', `no pending call ${result.callId}`);
    if (call.hostSession !== host.sessionId)
      throw new ProtocolError('forbidden', 'only the host may answer its calls');
    this.finish(
      result.callId,
      result.error === undefined ? { result: result.result } : { error: result.error },
    );
  }

  async hostDisconnected(session: SessionIdentity): Promise<void> {
    for (const entry of this.servers.get(session.meshId)?.values() ?? []) {
      if (entry.hostSession === session.sessionId) entry.online = false;
    }
    this.failCalls((call) => call.hostSession === session.sessionId, 'host_left: the host disconnected');
  }

  async hostReconnected(session: SessionIdentity): Promise<void> {
    for (const entry of this.servers.get(session.meshId)?.values() ?? []) {
      if (entry.hostSession === session.sessionId) entry.online = true;
    }
  }

  async sessionEnded(meshId: string, sessionId: string): Promise<void> {
    const mesh = this.servers.get(meshId);
    for (const [name, entry] of mesh ?? []) if (entry.hostSession === sessionId) mesh?.delete(name);
    if (mesh?.size === 0) this.servers.delete(meshId);
  }

  /** Every server this node knows, for the shared registry to take over on a flip. */
  entries(): Array<{ meshId: string; entry: McpServerEntry }> {
    return [...this.servers].flatMap(([meshId, servers]) =>
      [...servers.values()].map((entry) => ({ meshId, entry })),
    );
  }

  /** Flip back to local: the servers hosted here while the row was shared are this registry's again. */
  adopt(entries: Array<{ meshId: string; entry: McpServerEntry }>): void {
    this.servers.clear();
    for (const { meshId, entry } of entries) {
      const mesh = this.servers.get(meshId) ?? new Map<string, McpServerEntry>();
      mesh.set(entry.server, entry);
      this.servers.set(meshId, mesh);
    }
  }

  async activate(): Promise<void> {}

  /** The row went shared: calls waiting here get their answer now (the registry moves, they do not). */
  async deactivate(): Promise<void> {
    this.failCalls(() => true, STOPPED_ROUTING);
  }

  async close(): Promise<void> {}

  private failCalls(match: (call: PendingCall) => boolean, error: string): void {
    for (const [invokeId, call] of this.pending) if (match(call)) this.finish(invokeId, { error });
  }

  private finish(invokeId: string, outcome: { result?: unknown; error?: string }): void {
    const call = this.pending.get(invokeId);
    if (!call) return;
    this.pending.delete(invokeId);
    clearTimeout(call.timer);
    this.sink.send(call.callerSession, callResultFrame(call, outcome));
    this.sink.callEnded(outcomeOf(outcome));
  }
}
