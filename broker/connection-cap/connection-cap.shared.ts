import type { Logger } from '../log.js';
import type { RedisClient } from '../redis/clients.js';
import { RedisWithFallback } from '../redis/fallback.js';
import type { RedisGuard } from '../redis/guard.js';
import { PeriodicTask } from '../timing/periodic.js';
import type { ConnectionCap } from './connection-cap.js';
import type { LocalConnectionCap } from './connection-cap.local.js';

/**
 * Counts a mesh's sessions over every node: `cap:{<mesh>}:nodes` lists the nodes that hold some, and
 * `cap:{<mesh>}:<node>` is one node's part, a set of session ids that expires (TTL) unless its node refreshes
 * it. Admission is one Lua script (sum the live parts, compare with the cap, add the session), so two nodes
 * never both admit the last place. A dead node's part expires within `partTtlMs`, giving its places back.
 * The `{<mesh>}` hash tag puts all of a mesh's keys in one slot: on a Redis Cluster the script may read
 * them all (it builds the part keys from the node list, so they must share the declared keys' slot), and a
 * refresh pipeline stays on one master (docs/redis-cluster.md).
 */
const ADMIT = `
local nodes = KEYS[1]
local mine = KEYS[2]
local session, cap, ttl, prefix = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
if redis.call('SISMEMBER', mine, session) == 1 then
  redis.call('PEXPIRE', mine, ttl)
  return 1
end
local total = 0
for _, node in ipairs(redis.call('SMEMBERS', nodes)) do
  local part = prefix .. node
  -- Already admitted through another node (a replacing connection): it moves here, counted once.
  if part ~= mine and redis.call('SISMEMBER', part, session) == 1 then
    redis.call('SREM', part, session)
    redis.call('SADD', mine, session)
    redis.call('PEXPIRE', mine, ttl)
    redis.call('SADD', nodes, ARGV[5])
    redis.call('PEXPIRE', nodes, ttl)
    return 1
  end
  local size = redis.call('SCARD', part)
  if size == 0 then redis.call('SREM', nodes, node) end
  total = total + size
end
if total >= cap then return 0 end
redis.call('SADD', mine, session)
redis.call('PEXPIRE', mine, ttl)
redis.call('SADD', nodes, ARGV[5])
redis.call('PEXPIRE', nodes, ttl)
return 1
`;

/** The mesh's list of nodes holding a part. */
function nodesKey(meshId: string): string {
  return `cap:{${meshId}}:nodes`;
}

/** One node's part of the mesh's count. */
function partKey(meshId: string, nodeId: string): string {
  return `cap:{${meshId}}:${nodeId}`;
}

export interface SharedCapOptions {
  redis: RedisClient;
  guard: RedisGuard;
  nodeId: string;
  cap: number;
  partTtlMs: number;
  /** This node's own count: kept in step, served while Redis is unreachable, adopted on a flip. */
  fallback: LocalConnectionCap;
  onFallback: () => void;
  log: Logger;
}

/**
 * The global per-mesh cap (flag `ha.connection-cap`). With Redis unreachable it falls back to this node's
 * own count (N nodes may then admit up to N × cap), logs the first fallback and counts each one.
 */
export class SharedConnectionCap implements ConnectionCap {
  private readonly held = new Map<string, Set<string>>();
  /**
   * Sessions that may still be listed in this node's part although this node does not hold them: a release
   * whose SREM was not confirmed (Redis down, no offline queue), or an admission whose script timed out
   * (it may have run) and that the local count then refused. Each refresh removes them until Redis confirms.
   */
  private readonly stale = new Map<string, Set<string>>();
  /** Every mesh this node ever wrote a part for: its parts are replaced when it becomes shared again. */
  private readonly written = new Set<string>();
  /** Keeps this node's parts alive: every third of their TTL. */
  private readonly refresher: PeriodicTask;
  private readonly redisFirst: RedisWithFallback;

  constructor(private readonly options: SharedCapOptions) {
    this.redisFirst = new RedisWithFallback({
      guard: options.guard,
      onFallback: options.onFallback,
      log: options.log,
      fallingBackMessage: 'connection cap: Redis unavailable, per-node count only',
    });
    this.refresher = new PeriodicTask({
      everyMs: Math.max(250, options.partTtlMs / 3),
      run: () => this.refresh(),
      onError: { log: options.log, message: 'cap refresh failed' },
    });
  }

  /**
   * Keeps this node's parts alive; the sessions this node admitted while the row was local (the fallback
   * counted them) are counted globally from now on.
   */
  async activate(): Promise<void> {
    this.refresher.start();
    for (const { meshId, sessionId } of this.options.fallback.entries()) this.remember(meshId, sessionId);
    // A part left from an earlier shared period may list sessions that ended meanwhile: replace it.
    await this.refresh(true);
  }

  /** This node's parts expire by themselves; its local count (the fallback) stays exact. */
  async deactivate(): Promise<void> {
    void this.refresher.stop();
    this.held.clear();
    // The part expires, and activate replaces it.
    this.stale.clear();
  }

  async admit(meshId: string, sessionId: string): Promise<boolean> {
    const { redis, nodeId, cap, partTtlMs } = this.options;
    // Its outcome decides from here: admitted, it is held; refused by the script, the part does not list it.
    this.unmarkStale(meshId, sessionId);
    const viaRedis = async (): Promise<boolean> => {
      const admitted = await redis.eval(
        ADMIT,
        2,
        nodesKey(meshId),
        partKey(meshId, nodeId),
        sessionId,
        cap,
        partTtlMs,
        `${redis.options.keyPrefix ?? ''}${partKey(meshId, '')}`,
        nodeId,
      );
      if (admitted === 1) this.remember(meshId, sessionId);
      // The local count follows too, so a fallback starts from what this node really holds.
      if (admitted === 1) await this.options.fallback.admit(meshId, sessionId);
      return admitted === 1;
    };
    const locally = async (): Promise<boolean> => {
      const admitted = await this.options.fallback.admit(meshId, sessionId);
      if (admitted) this.remember(meshId, sessionId);
      // A script that timed out may have added it to the part: taken out again.
      else this.forget(meshId, sessionId);
      return admitted;
    };
    return this.redisFirst.run(viaRedis, locally);
  }

  async release(meshId: string, sessionId: string): Promise<void> {
    this.held.get(meshId)?.delete(sessionId);
    if (this.held.get(meshId)?.size === 0) this.held.delete(meshId);
    await this.options.fallback.release(meshId, sessionId);
    this.forget(meshId, sessionId);
  }

  /**
   * Takes a session this node does not hold out of its part. Not awaited: a stalled Redis must not hold the
   * socket's close. Until Redis confirms, every refresh removes it again (a refreshed part never expires).
   */
  private forget(meshId: string, sessionId: string): void {
    let set = this.stale.get(meshId);
    if (!set) {
      set = new Set();
      this.stale.set(meshId, set);
    }
    set.add(sessionId);
    void this.options.redis
      .srem(partKey(meshId, this.options.nodeId), sessionId)
      .then(() => this.unmarkStale(meshId, sessionId))
      .catch(() => {});
  }

  private unmarkStale(meshId: string, sessionId: string): void {
    const set = this.stale.get(meshId);
    set?.delete(sessionId);
    if (set?.size === 0) this.stale.delete(meshId);
  }

  async close(): Promise<void> {}

  private remember(meshId: string, sessionId: string): void {
    let set = this.held.get(meshId);
    if (!set) {
      set = new Set();
      this.held.set(meshId, set);
    }
    set.add(sessionId);
    this.unmarkStale(meshId, sessionId);
    this.written.add(meshId);
  }

  /** Re-asserts this node's parts (also after Redis lost them in a restart). */
  private async refresh(replace = false): Promise<void> {
    if (this.options.redis.status !== 'ready') return;
    const { redis, nodeId, partTtlMs } = this.options;
    try {
      // One pipeline per mesh: its keys share a slot, so on a cluster each goes to one master whole.
      const meshes = new Set([...this.held.keys(), ...this.stale.keys(), ...(replace ? this.written : [])]);
      const pipelines = [...meshes].map((meshId) => {
        const pipeline = redis.pipeline();
        const part = partKey(meshId, nodeId);
        // A part left from an earlier shared period lists sessions that ended while the row was local.
        if (replace && this.written.has(meshId)) pipeline.del(part);
        const stale = [...(this.stale.get(meshId) ?? [])];
        if (stale.length > 0) pipeline.srem(part, ...stale);
        const sessions = this.held.get(meshId);
        if (sessions) {
          pipeline.sadd(part, ...sessions);
          pipeline.pexpire(part, partTtlMs);
          pipeline.sadd(nodesKey(meshId), nodeId);
          pipeline.pexpire(nodesKey(meshId), partTtlMs);
        }
        return pipeline.exec().then(() => {
          for (const sessionId of stale) this.unmarkStale(meshId, sessionId);
        });
      });
      await Promise.all(pipelines);
    } catch (error) {
      this.options.log.debug({ err: error }, 'cap refresh failed');
    }
  }
}
