import { ProtocolError } from '../../protocol/errors.js';
import type { SessionIdentity } from '../connections/connection.js';
import { McpCallProtocol, SINGLE_NODE } from './call-protocol.js';
import { assertWithinLimits, type McpLimits, usageOf } from './limits.js';
import {
  assertCallable,
  type McpCall,
  type McpListPage,
  type McpPageRequest,
  type McpRegistry,
  type McpResult,
  type McpServerEntry,
  type McpSink,
  type McpTool,
  type RevokedAmong,
  STOPPED_ROUTING,
} from './mcp.js';
import { assertListable, byName, fillPage } from './page.js';

/** The one node of the local registry, as its calls name it (no call leaves this process). */
const THIS_NODE = 'local';

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
  /** Both ends of every call, in this process (call-protocol.ts). */
  private readonly calls: McpCallProtocol;

  constructor(
    sink: McpSink,
    callTimeoutMs: number,
    private readonly limits: McpLimits,
    private readonly revokedAmong: RevokedAmong,
  ) {
    // One process holds both ends of a call, so an answer after the caller's timeout is `not_found`.
    this.calls = new McpCallProtocol({
      nodeId: THIS_NODE,
      sink,
      callTimeoutMs,
      transport: SINGLE_NODE,
      lateAnswers: 'refused',
    });
  }

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
    assertWithinLimits(usageOf(mesh.values(), host.pubkey, server), tools.length, this.limits);
    mesh.set(server, entry);
    this.servers.set(host.meshId, mesh);
  }

  async unregister(host: SessionIdentity, server: string): Promise<void> {
    const entry = this.servers.get(host.meshId)?.get(server);
    if (!entry) throw new ProtocolError('not_found', `no server "${server}" in this mesh`);
    if (entry.hostSession !== host.sessionId)
      throw new ProtocolError('forbidden', 'only the host may unregister a server');
    this.servers.get(host.meshId)?.delete(server);
    this.calls.failRouted(
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
    await this.calls.start(caller, call, { hostSession: entry.hostSession, hostNode: THIS_NODE });
  }

  async result(host: SessionIdentity, result: McpResult): Promise<void> {
    await this.calls.hostAnswered(host, result);
  }

  async hostDisconnected(session: SessionIdentity): Promise<void> {
    for (const entry of this.servers.get(session.meshId)?.values() ?? []) {
      if (entry.hostSession === session.sessionId) entry.online = false;
    }
    this.calls.failRouted(
      (call) => call.hostSession === session.sessionId,
      'host_left: the host disconnected',
    );
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

  /** The session hosting `server` in the mesh here, if any (what shadow mode compares for a call). */
  hostSessionOf(meshId: string, server: string): string | undefined {
    return this.servers.get(meshId)?.get(server)?.hostSession;
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
    this.calls.stop(STOPPED_ROUTING);
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
    this.calls.failRouted((call) => sessions.has(call.hostSession), 'host_left: the host member was revoked');
  }
}
