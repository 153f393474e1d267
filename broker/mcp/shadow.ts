/**
 * Shadow comparator of `ha.mcp` (docs/mcp.md § Shadow): what the local registry answered, against what the
 * shared registry would on a shadow copy. Compared: each call (the session it was routed to, or the
 * refusal's code: `not_found` for a server hosted on another node is the local gap), each `mcp.list` page,
 * and each registration (accepted, or refused with `conflict` / `limit_exceeded`, counted over every node).
 *
 * The shared side, on a shadow copy: the shared registry's rows (`mcp_servers`, with the node holding the
 * host's socket) mirrored into the shadow Redis (broker/shadow/copy.ts), one hash per mesh under
 * `shadow:mcp:<mesh>` (server → its entry), written by every node in shadow. Each registration,
 * unregistration, host disconnect and reconnect and session end the local registry answers is applied to
 * the copy with the shared rules (SharedMcpRegistry): a name held by another session is a conflict, the
 * bounds count the whole mesh, a disconnect takes offline the servers whose host's socket was here, a
 * reconnect brings them online here, a revoked host's servers are gone (the members directory is read,
 * never written). The live `mcp_servers` rows and the live registry are never read for it or written.
 */
import type { SessionIdentity } from '../connections/connection.js';
import type { RedisClient } from '../redis/clients.js';
import { openShadowRedis, type ShadowRedis } from '../shadow/copy.js';
import { type RowShadow, refusalCode, type ShadowSample } from '../shadow/shadow.js';
import { assertWithinLimits, type McpLimits, usageOf } from './limits.js';
import {
  assertCallable,
  type McpCall,
  type McpListPage,
  type McpPageRequest,
  type McpServerEntry,
  type McpTool,
  type RevokedAmong,
} from './mcp.js';
import type { LocalMcpRegistry } from './mcp.local.js';
import { assertListable, byName, fillPage } from './page.js';

/** A mesh's hash outlives the nodes that wrote it by at most this long. */
export const COPY_TTL_S = 24 * 3600;

/** A row of the copy: the entry and the node holding its host's socket. */
type CopyEntry = McpServerEntry & { hostNode: string };

export interface McpShadowOptions {
  local: LocalMcpRegistry;
  redis: RedisClient;
  nodeId: string;
  limits: McpLimits;
  revokedAmong: RevokedAmong;
}

const keyOf = (meshId: string) => `mcp:${meshId}`;

/** What an answer is for the comparison: `accepted`, a route, or the refusal as it came. */
const ACCEPTED = 'accepted';

/** The shared registry's rows on the shadow copy: one hash per mesh, read and written with its rules. */
class McpCopy {
  private redis: ShadowRedis | undefined;

  constructor(private readonly options: McpShadowOptions) {}

  get isOpen(): boolean {
    return this.redis !== undefined;
  }

  /** Opens the copy and starts it with what the local registry holds (a flip's adopt: a name taken stays taken). */
  async open(): Promise<void> {
    this.redis = await openShadowRedis(this.options.redis);
    const byMesh = new Map<string, McpServerEntry[]>();
    for (const { meshId, entry } of this.options.local.entries())
      byMesh.set(meshId, [...(byMesh.get(meshId) ?? []), entry]);
    for (const [meshId, entries] of byMesh) {
      const taken = new Map((await this.rows(meshId)).map((row) => [row.server, row.hostSession]));
      const free = entries.filter(
        (entry) => (taken.get(entry.server) ?? entry.hostSession) === entry.hostSession,
      );
      await this.write(
        meshId,
        free.map((entry) => ({ ...entry, hostNode: this.options.nodeId })),
      );
    }
  }

  async close(): Promise<void> {
    await this.redis?.close();
    this.redis = undefined;
  }

  private client(): ShadowRedis['client'] {
    if (!this.redis?.guard.usable()) throw new Error('mcp shadow copy: Redis unavailable');
    return this.redis.client;
  }

  /** The mesh's rows whose host is not revoked (the shared registry's HOST_NOT_REVOKED). */
  async rows(meshId: string): Promise<CopyEntry[]> {
    const all = Object.values(await this.client().hgetall(keyOf(meshId))).map(
      (json) => JSON.parse(json) as CopyEntry,
    );
    if (all.length === 0) return all;
    const revoked = await this.options.revokedAmong(meshId, [...new Set(all.map((entry) => entry.host))]);
    return all.filter((entry) => !revoked.has(entry.host));
  }

  async write(meshId: string, entries: CopyEntry[]): Promise<void> {
    if (entries.length === 0) return;
    const key = keyOf(meshId);
    const fields = entries.flatMap((entry) => [entry.server, JSON.stringify(entry)]);
    await this.client()
      .multi()
      .hset(key, ...fields)
      .expire(key, COPY_TTL_S)
      .exec();
  }

  async remove(meshId: string, servers: string[]): Promise<void> {
    if (servers.length > 0) await this.client().hdel(keyOf(meshId), ...servers);
  }

  /** The shared registration on the copy: `accepted`, or the refusal's code; written when `keep`. */
  async register(args: readonly unknown[], keep: boolean): Promise<unknown> {
    const [host, server, description, tools] = args as [SessionIdentity, string, string, McpTool[]];
    const entry: CopyEntry = {
      server,
      description,
      host: host.pubkey,
      hostSession: host.sessionId,
      tools,
      online: true,
      hostNode: this.options.nodeId,
    };
    const mesh = await this.rows(host.meshId);
    try {
      assertListable({ server, description, host: host.pubkey, tools, online: true });
      if (mesh.some((row) => row.server === server && row.hostSession !== host.sessionId))
        return { refused: 'conflict' };
      assertWithinLimits(usageOf(mesh, host.pubkey, server), tools.length, this.options.limits);
    } catch (error) {
      const code = refusalCode(error);
      if (code === undefined) throw error;
      return { refused: code };
    }
    // A registration the local registry refused is not made: the host was told no, the copy stays in step.
    if (keep) await this.write(host.meshId, [entry]);
    return ACCEPTED;
  }

  /** Where the shared registry would route a call: the host session, or the refusal's code. */
  async route(caller: SessionIdentity, call: McpCall): Promise<unknown> {
    const entry = (await this.rows(caller.meshId)).find((row) => row.server === call.server);
    try {
      assertCallable(entry, call);
      return { routed: (entry as CopyEntry).hostSession };
    } catch (error) {
      const code = refusalCode(error);
      if (code === undefined) throw error;
      return { refused: code };
    }
  }

  /** The shared registry's `mcp.list` page. */
  async list(meshId: string, page: McpPageRequest): Promise<McpListPage> {
    const after = page.after;
    const entries = (await this.rows(meshId))
      .filter((entry) => after === undefined || entry.server > after)
      .sort(byName)
      .map(({ hostNode: _node, ...entry }) => entry);
    return fillPage(entries, page);
  }

  /** Rewrites the mesh's entries of `sessionId` that `match`, with `change` applied. */
  async update(
    meshId: string,
    sessionId: string,
    match: (entry: CopyEntry) => boolean,
    change: (entry: CopyEntry) => CopyEntry,
  ): Promise<void> {
    const mine = (await this.rows(meshId)).filter((entry) => entry.hostSession === sessionId && match(entry));
    await this.write(meshId, mine.map(change));
  }
}

/** Applies a change the local registry made to the copy (nothing to compare: undefined). */
async function follow(copy: McpCopy, nodeId: string, method: string, args: readonly unknown[]) {
  switch (method) {
    case 'unregister': {
      const [host, server] = args as [SessionIdentity, string];
      const row = (await copy.rows(host.meshId)).find((entry) => entry.server === server);
      if (row?.hostSession === host.sessionId) await copy.remove(host.meshId, [server]);
      return;
    }
    case 'hostDisconnected': {
      const [session] = args as [SessionIdentity];
      await copy.update(
        session.meshId,
        session.sessionId,
        (entry) => entry.hostNode === nodeId,
        (entry) => ({ ...entry, online: false }),
      );
      return;
    }
    case 'hostReconnected': {
      const [session] = args as [SessionIdentity];
      await copy.update(
        session.meshId,
        session.sessionId,
        () => true,
        (entry) => ({ ...entry, online: true, hostNode: nodeId }),
      );
      return;
    }
    case 'sessionEnded': {
      const [meshId, sessionId] = args as [string, string];
      const gone = (await copy.rows(meshId)).filter((entry) => entry.hostSession === sessionId);
      await copy.remove(
        meshId,
        gone.map((entry) => entry.server),
      );
      return;
    }
  }
}

export function mcpShadow(options: McpShadowOptions): RowShadow {
  const copy = new McpCopy(options);
  return {
    observes: [
      'register',
      'unregister',
      'list',
      'call',
      'hostDisconnected',
      'hostReconnected',
      'sessionEnded',
    ],
    comparesRefusals: ['register', 'call'],
    capture(method, args, answer) {
      if (method === 'register') return answer === undefined ? ACCEPTED : answer;
      if (method !== 'call' || answer !== undefined) return answer;
      // Answered: routed to the session the local registry holds for the server now.
      const [caller, call] = args as [SessionIdentity, McpCall];
      return { routed: options.local.hostSessionOf(caller.meshId, call.server) ?? null };
    },
    start: () => copy.open(),
    stop: () => copy.close(),
    async compare(method, args, local): Promise<ShadowSample | undefined> {
      if (!copy.isOpen) return undefined;
      if (method === 'register') {
        const shared = await copy.register(args, local === ACCEPTED);
        return { subject: `register ${args[1] as string}`, local, shared };
      }
      if (method === 'call') {
        const [caller, call] = args as [SessionIdentity, McpCall];
        return { subject: `call ${call.server}`, local, shared: await copy.route(caller, call) };
      }
      if (method === 'list') {
        const [meshId, page] = args as [string, McpPageRequest];
        return { subject: `mcp.list ${meshId}`, local, shared: await copy.list(meshId, page) };
      }
      await follow(copy, options.nodeId, method, args);
      return undefined;
    },
  };
}
