import { randomUUID } from 'node:crypto';
import { ProtocolError } from '../../protocol/errors.js';
import type { SessionIdentity } from '../connections/connection.js';
import { assertWithinLimits, type McpLimits, type McpUsage } from './limits.js';
import {
  assertCallable,
  callResultFrame,
  type McpCall,
  type McpListPage,
  type McpPageRequest,
  type McpRegistry,
  type McpResult,
  type McpServerEntry,
  type McpSink,
  type McpTool,
  outcomeOf,
  type RevokedAmong,
  STOPPED_ROUTING,
} from './mcp.js';
import { assertListable, byName, fillPage } from './page.js';

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
 * finds no server (`not_found`), a host's servers are invisible to other nodes' `mcp.list`, and the
 * per-mesh bounds count this node's servers only (N nodes admit N × the mesh's bound). A revoked host's
 * servers are dropped when the mesh is next listed, called or registered in (the directory says who is
 * revoked), so they go at once even while the host's session is in its grace period.
 */
export class LocalMcpRegistry implements McpRegistry {
  /** meshId → server name → entry */
  private readonly servers = new Map<string, Map<string, McpServerEntry>>();
  /** broker-made invoke id → pending call */
  private readonly pending = new Map<string, PendingCall>();

  constructor(
    private readonly sink: McpSink,
    private readonly callTimeoutMs: number,
    private readonly limits: McpLimits,
    private readonly revokedAmong: RevokedAmong,
  ) {}

  async register(
    host: SessionIdentity,
    server: string,
    description: string,
    tools: McpTool[],
  ): Promise<void> {
    const entry: McpServerEntry = {
      server,
      description,
      host: host.pubkey,
      hostSession: host.sessionId,
      tools,
      online: true,
    };
    assertListable(entry);
    await this.dropRevokedHosts(host.meshId);
    // From here to the write nothing awaits: no other registration can slip between the count and it.
    const mesh = this.servers.get(host.meshId) ?? new Map<string, McpServerEntry>();
    const existing = mesh.get(server);
    if (existing && existing.hostSession !== host.sessionId) {
      throw new ProtocolError('conflict', `server "${server}" is already hosted by another session`);
    }
    assertWithinLimits(usageOf(mesh, host.pubkey, server), tools.length, this.limits);
    mesh.set(server, entry);
    this.servers.set(host.meshId, mesh);
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

  async list(meshId: string, page: McpPageRequest): Promise<McpListPage> {
    await this.dropRevokedHosts(meshId);
    const after = page.after;
    const entries = [...(this.servers.get(meshId)?.values() ?? [])]
      .filter((entry) => after === undefined || entry.server > after)
      .sort(byName);
    return fillPage(entries, page);
  }

  async call(caller: SessionIdentity, call: McpCall): Promise<void> {
    const found = this.servers.get(caller.meshId)?.get(call.server);
    if (found) await this.dropRevokedHosts(caller.meshId, [found.host]);
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

  /**
   * Drops the servers of the mesh's revoked hosts (of `hosts`, or of every host the mesh has here) and
   * fails the calls waiting on them: a revoked member hosts nothing, on any node, grace period or not.
   */
  private async dropRevokedHosts(meshId: string, hosts?: string[]): Promise<void> {
    const mesh = this.servers.get(meshId);
    if (!mesh || mesh.size === 0) return;
    const revoked = await this.revokedAmong(
      meshId,
      hosts ?? [...new Set([...mesh.values()].map((e) => e.host))],
    );
    if (revoked.size === 0) return;
    const sessions = new Set<string>();
    for (const [name, entry] of mesh) {
      if (!revoked.has(entry.host)) continue;
      mesh.delete(name);
      sessions.add(entry.hostSession);
    }
    if (mesh.size === 0) this.servers.delete(meshId);
    this.failCalls((call) => sessions.has(call.hostSession), 'host_left: the host member was revoked');
  }

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

/** What a mesh's servers use besides `server` (replaced by this registration, so not counted twice). */
function usageOf(mesh: Map<string, McpServerEntry>, member: string, server: string): McpUsage {
  const usage: McpUsage = { memberServers: 0, meshServers: 0, memberTools: 0, meshTools: 0 };
  for (const entry of mesh.values()) {
    if (entry.server === server) continue;
    usage.meshServers += 1;
    usage.meshTools += entry.tools.length;
    if (entry.host !== member) continue;
    usage.memberServers += 1;
    usage.memberTools += entry.tools.length;
  }
  return usage;
}
