/**
 * The contract suites' harness (issue 16, item 5): one suite per row interface, run against both of the
 * row's implementations.
 *
 * - a *local* world: one in-process node, every HA flag off (so the row runs its local implementation);
 * - a *shared* world: two in-process nodes over one real Postgres database and one Redis prefix, every HA
 *   flag on (the phase-3 cluster), so the contract must hold cluster-wide (a peer on node A, one on B);
 * - a *cluster* world: the shared world on a throw-away three-master Redis Cluster (REDIS_CLUSTER_NODES,
 *   docs/redis-cluster.md) instead of the single Redis, for the suites of rows that use Redis
 *   (`WORLDS_WITH_REDIS_CLUSTER`).
 *
 * A suite writes its contract once against `world.a` and `world.b` (the same node in the local world, two
 * nodes in the shared one), and flips its row's flag with `world.flip()`, which rewrites the flags file the
 * nodes read (atomically, plus the "refresh now" push `workbench flags set` sends) and resolves once every
 * node reported `row.switched` for the flag (and finished that reconcile pass). Nothing here polls a node
 * for a switch; `waitFor` is left for conditions that have no event.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MemberKeys, MeshClient, MeshClientOptions } from '@mesh-broker/sdk';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { pushRefreshOnce } from '../../broker/flag-refresh.js';
import { FAST_CLUSTER } from '../../cli/cluster/fast-timings.js';
import { renderFlagsDocument } from '../../flags/document.js';
import { FLAG_KEYS, type FlagKey, type FlagValues } from '../../flags/registry.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { ThrowawayRedisCluster } from '../helpers/redis-cluster.js';
import { seriesValue } from '../helpers/verifier.js';
import { waitForOrGiveUp } from '../helpers/wait.js';

export type WorldKind = 'local' | 'shared' | 'cluster';

/** Both worlds, for `describe.each`. */
export const WORLDS: WorldKind[] = ['local', 'shared'];

/** Both, and the shared world on a Redis Cluster: for the rows whose shared implementation uses Redis. */
export const WORLDS_WITH_REDIS_CLUSTER: WorldKind[] = [...WORLDS, 'cluster'];

const REDIS_URL = 'redis://127.0.0.1:6379';
const FLAGS_ENV = 'contract';
/** How long a flip may take to land on every node. */
const FLIP_TIMEOUT_MS = 15_000;

export interface WorldOptions {
  /** The row under test: off in the local world, on in the shared world (its "home" value). */
  flag: FlagKey;
  /** Broker variables for every node (timings, quotas), over FAST_CLUSTER. */
  env?: Record<string, string>;
  /** Other flags' values in the shared world (default: every HA flag on). */
  sharedFlags?: Partial<FlagValues>;
  /** Other flags' values in the local world (default: every HA flag off). */
  localFlags?: Partial<FlagValues>;
}

export interface Health {
  status: string;
  node: string;
  backgroundWork: 'active' | 'standby';
}

export class World {
  readonly nodes: TestNode[] = [];
  readonly prefix = `wbcontract:${randomBytes(4).toString('hex')}:`;
  db!: TestDatabase;
  /** The cluster world's Redis Cluster. */
  redisCluster: ThrowawayRedisCluster | undefined;
  private flagsDir = '';
  private values!: FlagValues;
  private readonly extra: TestNode[] = [];

  constructor(
    readonly kind: WorldKind,
    readonly options: WorldOptions,
  ) {}

  /** The row's flag. */
  get flag(): FlagKey {
    return this.options.flag;
  }

  /** The row flag's value this world starts (and should end) with: off locally, on in the cluster. */
  get home(): boolean {
    return this.kind !== 'local';
  }

  /** The first node. */
  get a(): TestNode {
    return this.nodes[0]!;
  }

  /** The other node of the shared world; the same node as `a` in the local world. */
  get b(): TestNode {
    return this.nodes[this.nodes.length - 1]!;
  }

  /** What every node acts on now. */
  flagValue(flag: FlagKey = this.flag): boolean {
    return this.values[flag];
  }

  /**
   * Whether a property of the row holds across the nodes right now: always in the local world (one
   * node), and in the shared world only while the row's flag is on (off, each node keeps its own state:
   * the local implementation's documented gap).
   */
  crossNode(flag: FlagKey = this.flag): boolean {
    return this.kind === 'local' || this.values[flag];
  }

  async start(): Promise<void> {
    if (this.kind === 'cluster') this.redisCluster = await ThrowawayRedisCluster.start();
    this.db = await createTestDatabase(`contract_${this.options.flag.replace('ha.', '')}_${this.kind}`);
    this.flagsDir = mkdtempSync(join(tmpdir(), 'wb-contract-flags-'));
    const others = this.home ? this.options.sharedFlags : this.options.localFlags;
    const values = Object.fromEntries(FLAG_KEYS.map((key) => [key, this.home])) as FlagValues;
    this.values = { ...values, ...others, [this.flag]: this.home };
    this.writeFlags();
    const count = this.home ? 2 : 1;
    for (let i = 0; i < count; i++) this.nodes.push(await this.startNode(String.fromCharCode(97 + i)));
  }

  /** Another node of this world (same database, Redis prefix, flags and settings); stopped at teardown. */
  async startNode(label = `x${this.extra.length}`): Promise<TestNode> {
    const node = await startNode({
      kind: 'in-process',
      databaseUrl: this.db.url,
      env: {
        ...FAST_CLUSTER,
        ...this.options.env,
        NODE_ID: `${this.kind}-${label}-${randomBytes(2).toString('hex')}`,
        REDIS_KEY_PREFIX: this.prefix,
        ...(this.redisCluster ? { REDIS_CLUSTER_NODES: this.redisCluster.nodesVariable } : {}),
        FLAGS_DIR: this.flagsDir,
        FLAGS_ENV,
      },
    });
    if (this.nodes.length >= (this.home ? 2 : 1)) this.extra.push(node);
    return node;
  }

  /** Sets the row's flag (or any flags) everywhere and waits until every running node acts on them. */
  async flip(value: boolean, flag: FlagKey = this.flag): Promise<void> {
    await this.setFlags({ [flag]: value });
  }

  async setFlags(changes: Partial<FlagValues>): Promise<void> {
    const running = [...this.nodes, ...this.extra].filter((node) => !stopped.has(node));
    const landed: Promise<void>[] = [];
    for (const [flag, value] of Object.entries(changes) as Array<[FlagKey, boolean]>) {
      const target = value ? 'shared' : 'local';
      for (const node of running) {
        if (node.events.using(flag) !== target) landed.push(switched(node, flag, target));
      }
    }
    this.values = { ...this.values, ...changes };
    this.writeFlags();
    // What `workbench flags set` does after writing: a push, so nodes read the file at once.
    const clusterNodes = this.redisCluster?.seedNodes;
    await pushRefreshOnce({ redisUrl: REDIS_URL, keyPrefix: this.prefix, clusterNodes }, FLAGS_ENV, {
      reason: 'contract test',
    });
    await Promise.all(landed);
  }

  /** A mesh and its members, made through node A's admin API. */
  mesh(members: number): Promise<TestMesh> {
    return createMesh(this.a, members);
  }

  /** A connected SDK peer on `node`; closed after each test. */
  peer(
    node: TestNode | TestNode[],
    mesh: TestMesh,
    member: MemberKeys,
    options: Partial<MeshClientOptions> = {},
  ): Promise<MeshClient> {
    const urls = (Array.isArray(node) ? node : [node]).map((n) => n.wsUrl);
    return connectPeer(urls, mesh, member, options);
  }

  /** The world's Redis keys matching `pattern` (after the prefix), from the single Redis or every master. */
  async redisKeys(pattern: string): Promise<string[]> {
    if (this.redisCluster) return this.redisCluster.keys(`${this.prefix}${pattern}`);
    const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
    try {
      await redis.connect();
      return (await redis.keys(`${this.prefix}${pattern}`)).sort();
    } finally {
      redis.disconnect();
    }
  }

  async health(node: TestNode): Promise<Health> {
    return (await (await fetch(`${node.url}/health`)).json()) as Health;
  }

  /** One series of a node's /metrics (labels: a subset), or 0 when absent. */
  async metric(node: TestNode, name: string, labels: Record<string, string> = {}): Promise<number> {
    const text = await (await fetch(`${node.url}/metrics`)).text();
    return seriesValue(text, name, { ...labels, node: node.nodeId }) ?? 0;
  }

  /** The nodes whose /health says they may run local background work now. */
  async activeNodes(): Promise<TestNode[]> {
    const running = [...this.nodes, ...this.extra].filter((node) => !stopped.has(node));
    const healths = await Promise.all(running.map((node) => this.health(node)));
    return running.filter((_, i) => healths[i]!.backgroundWork === 'active');
  }

  async stopNode(node: TestNode): Promise<void> {
    await this.settlePresence(node);
    stopped.add(node);
    await node.stop();
  }

  async teardown(): Promise<void> {
    closeAllClients();
    if (this.db) await this.settlePresence();
    for (const node of [...this.extra, ...this.nodes].reverse()) {
      stopped.add(node);
      await node.stop().catch(() => {});
    }
    await this.db?.drop().catch(() => {});
    if (this.flagsDir) rmSync(this.flagsDir, { recursive: true, force: true });
    // A throw-away cluster goes with its keys.
    if (this.redisCluster) await this.redisCluster.stop();
    else await dropRedisKeys(this.prefix);
  }

  /**
   * Waits (bounded) until no session of `node` (or of any node) is inside its grace period. A node that
   * stops while a grace period runs out can have its presence announce the leave after the rows that
   * handle it (audit, streams, watches) are closed; such a call never returns and spins the process
   * (the Switch bug described with these suites). Tests stop nodes only once their sessions are settled.
   */
  private async settlePresence(node?: TestNode): Promise<void> {
    const graceMs = Number(this.options.env?.PRESENCE_GRACE_MS ?? FAST_CLUSTER.PRESENCE_GRACE_MS);
    await waitForOrGiveUp(
      async () => {
        const pending = await this.db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM presence
            WHERE disconnected_at IS NOT NULL AND ($1::text IS NULL OR node_id = $1)`,
          [node?.nodeId ?? null],
        );
        return pending.rows[0]?.n === 0;
      },
      { timeoutMs: graceMs + 3000, intervalMs: 50 },
    );
  }

  private writeFlags(): void {
    // An atomic replace: a node never reads a half-written file.
    const file = join(this.flagsDir, `${FLAGS_ENV}.json`);
    const temporary = join(this.flagsDir, `.${FLAGS_ENV}.json.${randomBytes(3).toString('hex')}`);
    writeFileSync(temporary, renderFlagsDocument(this.values));
    renameSync(temporary, file);
  }
}

const stopped = new WeakSet<TestNode>();

/**
 * Resolves once `node` reported that `flag`'s row uses `target`, and the reconcile pass that moved it
 * ended (so the rows after it, e.g. background rows behind the gate, moved too). Rejects on a failed
 * switch or after FLIP_TIMEOUT_MS.
 */
function switched(node: TestNode, flag: FlagKey, target: 'local' | 'shared'): Promise<void> {
  const { events } = node;
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`${node.nodeId}: ${flag} did not switch to ${target} within ${FLIP_TIMEOUT_MS} ms`));
    }, FLIP_TIMEOUT_MS);
    const onSwitched = (event: { flag: FlagKey; using: string }) => {
      if (event.flag !== flag || event.using !== target) return;
      events.off('row.switched', onSwitched);
      events.once('reconciled', onReconciled);
    };
    const onReconciled = () => {
      cleanup();
      resolve();
    };
    const onFailed = (event: { flag: FlagKey; target: string; error: unknown }) => {
      if (event.flag !== flag || event.target !== target) return;
      cleanup();
      reject(new Error(`${node.nodeId}: switching ${flag} to ${target} failed: ${String(event.error)}`));
    };
    const cleanup = () => {
      clearTimeout(timer);
      events.off('row.switched', onSwitched);
      events.off('reconciled', onReconciled);
      events.off('row.switch-failed', onFailed);
    };
    events.on('row.switched', onSwitched);
    events.on('row.switch-failed', onFailed);
  });
}

async function dropRedisKeys(prefix: string): Promise<void> {
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  redis.on('error', () => {});
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await redis.unlink(...keys);
    } while (cursor !== '0');
  } catch {
    // best effort: every key of a test prefix also expires or is never read again
  } finally {
    redis.disconnect();
  }
}

/**
 * A world for the enclosing `describe`: started before its tests, torn down after them (nodes, clients,
 * database, flags folder, Redis keys); clients are closed after each test.
 */
export function useWorld(kind: WorldKind, options: WorldOptions): World {
  const world = new World(kind, options);
  beforeAll(() => world.start(), 60_000);
  afterEach(() => closeAllClients());
  afterAll(() => world.teardown(), 60_000);
  return world;
}

/** The flip sequence of every suite: there and back twice, ending where the world started. */
export function flipSequence(world: World): boolean[] {
  const away = !world.home;
  return [away, world.home, away, world.home];
}

/** Resolves on the next frame of `type` matching `predicate` (a thin wrapper for readability). */
export function nextFrame<T = Record<string, unknown>>(
  client: MeshClient,
  type: string,
  predicate: (frame: T) => boolean = () => true,
  timeoutMs = 10_000,
): Promise<T> {
  return client.next('frame', (f) => f.type === type && predicate(f as T), timeoutMs) as Promise<T>;
}

/** Frames of `type` a client receives from now on. */
export function collect<T = Record<string, unknown>>(client: MeshClient, type: string): T[] {
  const seen: T[] = [];
  client.on('frame', (f) => {
    if (f.type === type) seen.push(f as T);
  });
  return seen;
}
