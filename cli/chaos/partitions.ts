/**
 * Each chaos node's own network paths, so that one node can be cut from Postgres, from Redis or from its
 * peers while the others are not. Per node:
 *
 *   broker ── LatencyProxy (pg) ──────────────────────────────▶ throw-away Postgres
 *   broker ── LatencyProxy (redis) ── LossyRedisProxy ────────▶ throw-away redis-server
 *
 * The latency proxies add no delay; they are there for `cut()` (cli/proxies/latency-proxy.ts): bytes are
 * held, not refused, no RST is sent, so the broker sees what a real partition shows (a stalled socket, its
 * own timeouts), one way or both. The lossy proxy per node is the `bus-loss` fault's (all three at once)
 * and the outgoing half of a peer partition (that node's only).
 *
 * "Cut from its peers": the nodes never connect to each other; everything one node tells another goes
 * over the bus, Redis pub/sub (docs/design.md §2). So a node is cut from its peers when its bus is, and
 * nothing else: from-node, every bus publish it makes reaches no peer (its lossy proxy drops them all and
 * answers `:0`, which is what Redis answers when nobody listens); to-node, nothing its peers publish
 * reaches it (its subscriber connection, the one that sent SUBSCRIBE, is cut upstream → node). Its other
 * Redis traffic and its Postgres are untouched: that is `partition-redis` and `partition-postgres`.
 */
import { type CutDirection, LatencyProxy } from '../proxies/latency-proxy.js';
import { LossyRedisProxy } from '../proxies/lossy-redis-proxy.js';

/** Which way a partition drops bytes: both, only the node's outgoing ones, or only its incoming ones. */
export const PARTITION_WAYS = ['both', 'from-node', 'to-node'] as const;
export type PartitionWay = (typeof PARTITION_WAYS)[number];

/** A node is the client of its proxies: what it sends goes upstream. */
const CUT_OF: Record<PartitionWay, CutDirection> = {
  both: 'both',
  'from-node': 'to-upstream',
  'to-node': 'to-client',
};

/** A Redis connection that subscribed (RESP multibulk SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE): the bus listener. */
const SUBSCRIBES = /\*\d+\r\n\$\d+\r\n[PS]?SUBSCRIBE\r\n/i;

interface NodePaths {
  postgres: LatencyProxy;
  redis: LatencyProxy;
  bus: LossyRedisProxy;
}

export interface BusStats {
  publishes: number;
  dropped: number;
}

/** What a cut did while it held: bytes its proxies held at the heal, bus publishes of the node dropped. */
export interface CutEffect {
  heldBytes: number;
  droppedPublishes: number;
}

export class NodeLinks {
  private busLossRate = 0;
  /** Nodes whose outgoing bus is cut now (their loss rate stays 1 whatever `setBusLoss` says). */
  private readonly mutedBus = new Set<string>();
  /** Per node under a cut: its bus drops when the cut began. */
  private readonly droppedAtCut = new Map<string, number>();

  private constructor(private readonly paths: Map<string, NodePaths>) {}

  /** Starts every node's proxies, in front of Postgres and Redis on 127.0.0.1 (`seed`: the bus-loss draws). */
  static async start(
    nodes: string[],
    upstream: { postgresPort: number; redisPort: number; seed: number },
  ): Promise<NodeLinks> {
    const paths = new Map<string, NodePaths>();
    const links = new NodeLinks(paths);
    try {
      for (const [i, id] of nodes.entries()) {
        const bus = await LossyRedisProxy.start({
          upstream: `redis://127.0.0.1:${upstream.redisPort}`,
          seed: upstream.seed + i,
          channels: ':bus:',
        });
        paths.set(id, {
          bus,
          postgres: await LatencyProxy.start({ upstream: { port: upstream.postgresPort } }),
          redis: await LatencyProxy.start({
            upstream: { port: bus.port },
            mark: (chunk) => SUBSCRIBES.test(chunk.toString('latin1')),
          }),
        });
      }
      return links;
    } catch (error) {
      await links.close();
      throw error;
    }
  }

  /** The node's DATABASE_URL and REDIS_URL: the URLs it would have used, through its own proxies. */
  env(id: string, shared: { databaseUrl: string; redisUrl: string }): Record<string, string> {
    const paths = this.of(id);
    return {
      DATABASE_URL: withPort(shared.databaseUrl, paths.postgres.port),
      REDIS_URL: withPort(shared.redisUrl, paths.redis.port),
    };
  }

  cutPostgres(id: string, way: PartitionWay): void {
    this.noteCut(id);
    this.of(id).postgres.cut(CUT_OF[way]);
  }

  cutRedis(id: string, way: PartitionWay): void {
    this.noteCut(id);
    this.of(id).redis.cut(CUT_OF[way]);
  }

  cutPeers(id: string, way: PartitionWay): void {
    this.noteCut(id);
    const paths = this.of(id);
    if (way !== 'to-node') {
      this.mutedBus.add(id);
      paths.bus.lossRate = 1;
    }
    if (way !== 'from-node') paths.redis.cut('to-client', { marked: true });
  }

  /** Undoes every cut of the node; says what the cut held (nothing held: it tested nothing). */
  heal(id: string): CutEffect {
    const paths = this.of(id);
    const effect = {
      heldBytes: this.heldBytes(id),
      droppedPublishes: this.busStats(id).dropped - (this.droppedAtCut.get(id) ?? 0),
    };
    this.droppedAtCut.delete(id);
    paths.postgres.restore();
    paths.redis.restore();
    this.mutedBus.delete(id);
    paths.bus.lossRate = this.busLossRate;
    return effect;
  }

  private noteCut(id: string): void {
    if (!this.droppedAtCut.has(id)) this.droppedAtCut.set(id, this.busStats(id).dropped);
  }

  /** The share of every node's bus publishes dropped (`bus-loss`); a node cut from its peers keeps 1. */
  setBusLoss(rate: number): void {
    this.busLossRate = rate;
    for (const [id, paths] of this.paths) if (!this.mutedBus.has(id)) paths.bus.lossRate = rate;
  }

  /** Bus publishes seen and dropped so far, over every node (or one). */
  busStats(id?: string): BusStats {
    let publishes = 0;
    let dropped = 0;
    for (const [node, paths] of this.paths) {
      if (id !== undefined && node !== id) continue;
      const stats = paths.bus.stats();
      publishes += stats.publishes;
      dropped += stats.dropped;
    }
    return { publishes, dropped };
  }

  /** Bytes the node's proxies hold now (a partition that held nothing tested nothing). */
  heldBytes(id: string): number {
    const paths = this.of(id);
    return paths.postgres.stats().bufferedBytes + paths.redis.stats().bufferedBytes;
  }

  async close(): Promise<void> {
    await Promise.all(
      [...this.paths.values()].flatMap((p) => [p.postgres.close(), p.redis.close(), p.bus.close()]),
    );
  }

  private of(id: string): NodePaths {
    const paths = this.paths.get(id);
    if (!paths) throw new Error(`no network paths for node ${id}`);
    return paths;
  }
}

function withPort(url: string, port: number): string {
  const parsed = new URL(url);
  parsed.hostname = '127.0.0.1';
  parsed.port = String(port);
  return parsed.toString();
}
