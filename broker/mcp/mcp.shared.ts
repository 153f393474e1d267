import { ProtocolError } from '../../protocol/errors.js';
import type { Bus, Unsubscribe } from '../bus/bus.js';
import type { SessionIdentity } from '../connections/connection.js';
import { inTransaction, type Pool } from '../db/pool.js';
import { allOk, GroupCommit, SESSION_START_BURST_MS } from '../delivery/group-commit.js';
import type { Logger } from '../log.js';
import { type ListReads, primaryReads } from '../regions/regions.js';
import { type CallTransport, McpCallProtocol } from './call-protocol.js';
import { assertWithinLimits, type McpLimits, type McpUsage } from './limits.js';
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
} from './mcp.js';
import { assertListable, fillPage } from './page.js';

interface ServerRow {
  server: string;
  description: string;
  tools: McpTool[];
  host: string;
  hostSession: string;
  hostNode: string;
  online: boolean;
}

const COLUMNS = `server, description, tools, host_pubkey AS host, host_session AS "hostSession",
  host_node AS "hostNode", online`;

/**
 * Rows whose host member is not revoked (`s` is mcp_servers): a revoked member hosts nothing on any node
 * from the moment the directory says so, whether or not its sockets were closed yet; its rows go with
 * its sessions, or with the mesh's next registration.
 */
const HOST_NOT_REVOKED = `NOT EXISTS (SELECT 1 FROM members m
  WHERE m.mesh_id = s.mesh_id AND m.pubkey = s.host_pubkey AND m.revoked_at IS NOT NULL)`;

/** Rows read per query while a page is filled: bounds what is held beyond the page (page.ts). */
const PAGE_CHUNK = 8;

/** Reconnected hosts one statement moves here at most (a uuid array of this length). */
const HOSTS_PER_UPDATE = 1000;

/**
 * MCP across nodes (flag `ha.mcp`). The registry is rows in Postgres (with the node that holds the host's
 * socket); a call is routed over the bus to the host's node, which hands `mcp.invoke` to the host session
 * and sends the host's answer back to the caller's node. The caller's node owns the timeout; the host's
 * node fails the calls it routed when the host's socket closes (`host_left`). A call whose host node dies
 * meanwhile ends in `timeout`, and the dead node's servers go with its sessions (presence reaper).
 */
export class SharedMcpRegistry implements McpRegistry {
  /** Both ends of the calls through this node; the other node's end is reached over the bus. */
  private readonly calls: McpCallProtocol;
  private detach: Unsubscribe[] = [];
  /**
   * Every session's start marks its servers back online here, hosting or not: sessions starting together
   * (a drain moves thousands) share one UPDATE.
   */
  private readonly reconnecting = new GroupCommit<string, undefined>({
    write: async (sessionIds) => allOk(await this.markHostedHere(sessionIds)),
    maxInFlight: 1,
    burstMs: SESSION_START_BURST_MS,
    maxBatch: HOSTS_PER_UPDATE,
  });

  constructor(
    private readonly pool: Pool,
    private readonly bus: Bus,
    private readonly nodeId: string,
    sink: McpSink,
    callTimeoutMs: number,
    log: Logger,
    private readonly limits: McpLimits,
    /** Where `mcp.list` reads (the regions row); default the primary. */
    private readonly lists: ListReads = primaryReads(pool),
  ) {
    // The host's node cannot hear of a caller's timeout on another node: it takes a late answer.
    this.calls = new McpCallProtocol({
      nodeId,
      sink,
      callTimeoutMs,
      transport: busTransport(bus, log),
      lateAnswers: 'accepted',
    });
  }

  /** Takes calls for the hosts connected here, and the answers to calls made here. */
  async activate(): Promise<void> {
    if (this.detach.length > 0) return;
    this.detach = [
      this.bus.on('mcp.invoke', (_node, payload) => this.calls.receive(payload)),
      this.bus.on('mcp.result', (_node, payload) => this.calls.settle(payload.invokeId, payload.outcome)),
    ];
  }

  /** The row went local: every call in flight through this node gets its answer now. */
  async deactivate(): Promise<void> {
    for (const off of this.detach) off();
    this.detach = [];
    this.calls.stop('host_left: the host node stopped routing MCP calls (a flag flip or a shutdown)');
  }

  /**
   * Counted and written under the mesh's lock in one transaction: registrations on any node queue there,
   * so together they never pass a bound; a refusal rolls back and changes nothing.
   */
  async register(
    host: SessionIdentity,
    server: string,
    description: string,
    tools: McpTool[],
  ): Promise<void> {
    assertListable({ server, description, host: host.pubkey, tools, online: true });
    await inTransaction(this.pool, async (client) => {
      await client.query("SELECT pg_advisory_xact_lock(hashtextextended('mcp-servers:' || $1, 0))", [
        host.meshId,
      ]);
      await client.query(`DELETE FROM mcp_servers s WHERE s.mesh_id = $1 AND NOT ${HOST_NOT_REVOKED}`, [
        host.meshId,
      ]);
      const counted = await client.query<McpUsage & { taken: boolean | null }>(
        `SELECT count(*) FILTER (WHERE host_pubkey = $2 AND server <> $3)::int AS "memberServers",
                count(*) FILTER (WHERE server <> $3)::int AS "meshServers",
                coalesce(sum(jsonb_array_length(tools)) FILTER (WHERE host_pubkey = $2 AND server <> $3), 0)::int
                  AS "memberTools",
                coalesce(sum(jsonb_array_length(tools)) FILTER (WHERE server <> $3), 0)::int AS "meshTools",
                bool_or(host_session <> $4::uuid) FILTER (WHERE server = $3) AS taken
           FROM mcp_servers WHERE mesh_id = $1`,
        [host.meshId, host.pubkey, server, host.sessionId],
      );
      const { taken, ...usage } = counted.rows[0]!;
      if (taken) throw conflict(server);
      assertWithinLimits(usage, tools.length, this.limits);
      // The host check again in the write: a flip's write-through (adopt) takes no lock.
      const written = await client.query(
        `INSERT INTO mcp_servers (mesh_id, server, description, tools, host_pubkey, host_session, host_node, online)
         VALUES ($1, $2, $3, $4, $5, $6, $7, true)
         ON CONFLICT (mesh_id, server) DO UPDATE
           SET description = excluded.description, tools = excluded.tools, host_node = excluded.host_node, online = true
           WHERE mcp_servers.host_session = excluded.host_session
         RETURNING 1`,
        [host.meshId, server, description, JSON.stringify(tools), host.pubkey, host.sessionId, this.nodeId],
      );
      if (written.rowCount === 0) throw conflict(server);
    });
  }

  async unregister(host: SessionIdentity, server: string): Promise<void> {
    const entry = await this.find(host.meshId, server);
    if (!entry) throw new ProtocolError('not_found', `no server "${server}" in this mesh`);
    if (entry.hostSession !== host.sessionId)
      throw new ProtocolError('forbidden', 'only the host may unregister a server');
    await this.pool.query(
      'DELETE FROM mcp_servers WHERE mesh_id = $1 AND server = $2 AND host_session = $3',
      [host.meshId, server, host.sessionId],
    );
    this.calls.failRouted(
      (call) => call.hostSession === host.sessionId && call.server === server,
      'host_left: server unregistered',
    );
  }

  async list(meshId: string, page: McpPageRequest): Promise<McpListPage> {
    return fillPage(this.rowsAfter(meshId, page.after), page);
  }

  /** The mesh's listable servers in name order after `after`, read a few rows at a time as pulled. */
  private async *rowsAfter(meshId: string, after: string | undefined): AsyncGenerator<McpServerEntry> {
    let cursor = after;
    for (;;) {
      const result = await this.lists.read<ServerRow>(
        `SELECT ${COLUMNS} FROM mcp_servers s
          WHERE mesh_id = $1 AND ($2::text IS NULL OR server COLLATE "C" > $2) AND ${HOST_NOT_REVOKED}
          ORDER BY server COLLATE "C" LIMIT $3`,
        [meshId, cursor ?? null, PAGE_CHUNK],
      );
      for (const { hostNode: _node, ...entry } of result.rows) yield entry;
      if (result.rows.length < PAGE_CHUNK) return;
      cursor = result.rows[result.rows.length - 1]!.server;
    }
  }

  async call(caller: SessionIdentity, call: McpCall): Promise<void> {
    const entry = await this.find(caller.meshId, call.server);
    assertCallable(entry, call);
    await this.calls.start(caller, call, entry);
  }

  async result(host: SessionIdentity, result: McpResult): Promise<void> {
    await this.calls.hostAnswered(host, result);
  }

  async hostDisconnected(session: SessionIdentity): Promise<void> {
    await this.pool.query(
      'UPDATE mcp_servers SET online = false WHERE host_session = $1 AND host_node = $2',
      [session.sessionId, this.nodeId],
    );
    this.calls.failRouted(
      (call) => call.hostSession === session.sessionId,
      'host_left: the host disconnected',
    );
  }

  async hostReconnected(session: SessionIdentity): Promise<void> {
    await this.reconnecting.submit(session.sessionId);
  }

  private async markHostedHere(sessionIds: string[]): Promise<undefined[]> {
    await this.pool.query(
      'UPDATE mcp_servers SET online = true, host_node = $2 WHERE host_session = ANY ($1::uuid[])',
      [sessionIds, this.nodeId],
    );
    return sessionIds.map(() => undefined);
  }

  async sessionEnded(_meshId: string, sessionId: string): Promise<void> {
    await this.pool.query('DELETE FROM mcp_servers WHERE host_session = $1', [sessionId]);
  }

  /** Flip to shared: servers registered while local are written through (hosted on this node). */
  async adopt(entries: Array<{ meshId: string; entry: McpServerEntry }>): Promise<void> {
    // This node's rows are replaced by what the local registry holds now (a server unregistered while the
    // row was local must not come back from an earlier shared period).
    // Only servers of live hosts are written (a presence row: connected, or inside the grace period): an
    // entry the registry kept for a host whose end it never heard of (a lost bus message) is not made truth.
    await this.pool.query('DELETE FROM mcp_servers WHERE host_node = $1', [this.nodeId]);
    for (const { meshId, entry } of entries) {
      await this.pool.query(
        `INSERT INTO mcp_servers (mesh_id, server, description, tools, host_pubkey, host_session, host_node, online)
         SELECT $1::uuid, $2::text, $3::text, $4::jsonb, $5::text, $6::uuid, $7::text, $8::boolean
          WHERE EXISTS (SELECT 1 FROM presence WHERE session_id = $6::uuid)
         ON CONFLICT (mesh_id, server) DO NOTHING`,
        [
          meshId,
          entry.server,
          entry.description,
          JSON.stringify(entry.tools),
          entry.host,
          entry.hostSession,
          this.nodeId,
          entry.online,
        ],
      );
    }
  }

  /** Flip back to local: the servers whose host's socket is on this node. */
  async hostedHere(): Promise<Array<{ meshId: string; entry: McpServerEntry }>> {
    const result = await this.pool.query<ServerRow & { meshId: string }>(
      `SELECT mesh_id AS "meshId", ${COLUMNS} FROM mcp_servers WHERE host_node = $1`,
      [this.nodeId],
    );
    return result.rows.map(({ meshId, hostNode: _node, ...entry }) => ({ meshId, entry }));
  }

  async close(): Promise<void> {}

  private async find(meshId: string, server: string): Promise<ServerRow | undefined> {
    const result = await this.pool.query<ServerRow>(
      `SELECT ${COLUMNS} FROM mcp_servers s WHERE mesh_id = $1 AND server = $2 AND ${HOST_NOT_REVOKED}`,
      [meshId, server],
    );
    return result.rows[0];
  }
}

/** The protocol's messages to other nodes, over the bus (node channel). */
function busTransport(bus: Bus, log: Logger): CallTransport {
  return {
    toHost: (hostNode, invoke) => bus.publishToNode(hostNode, 'mcp.invoke', invoke),
    toCaller: async (callerNode, invokeId, outcome) => {
      if (!(await bus.publishToNode(callerNode, 'mcp.result', { invokeId, outcome }))) {
        log.warn({ invokeId }, 'mcp: could not send a result to the caller node (it will time out)');
      }
    },
  };
}

function conflict(server: string): ProtocolError {
  return new ProtocolError('conflict', `server "${server}" is already hosted by another session`);
}
