/**
 * Phase 4's two-region simulation on one machine (docs/multi-region.md § The simulated topology): region A
 * with a throw-away Postgres primary, every other region with a streaming replica of it made through the
 * link; a throw-away Redis, brokers and an HAProxy per region; the weighted entry (in region A) in front
 * of the regions' load balancers. Every connection that crosses regions goes through a LatencyProxy
 * (cli/proxies/latency-proxy.ts), one per (from, to, service), so a region can be cut off and restored.
 *
 * It runs inside one process (the links are this process's sockets): `workbench up --phase 4` keeps it in
 * the background and talks to it over a control socket (./control.ts). Everything it starts is registered
 * with cli/cluster/exit-cleanup.ts as it starts, so a failed start, an exception, SIGINT or SIGTERM before
 * `stop()` still removes every process, server and folder; `stop()` is the orderly way (brokers drain).
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ensureDatabase, runMigrations } from '../../../broker/db/migrate.js';
import { packageRoot } from '../../../broker/paths.js';
import { ThrowawayRedis } from '../../chaos/services.js';
import { freePort } from '../../ports.js';
import { LatencyProxy } from '../../proxies/latency-proxy.js';
import { onExit } from '../exit-cleanup.js';
import { waitHealthy } from '../health.js';
import {
  type BrokerBase,
  type ClusterFile,
  type ClusterNode,
  clusterBrokerEnv,
  clusterFilePath,
  prepareState,
  type RegionsState,
  readCluster,
  spawnBroker,
  startLoadBalancer,
  startNode,
  stopNode,
  stopProcess,
  writeCluster,
} from '../local.js';
import { PostgresPrimary, PostgresReplica } from '../pg-replica.js';
import { readTraefik } from '../traefik.js';
import {
  entryConfig,
  type Layout,
  type RegionAddresses,
  type RegionOptions,
  regionBrokerEnv,
  regionLayout,
  regionLbConfig,
} from './topology.js';

export const DATABASE_NAME = 'workbench';

export interface SimulationOptions extends RegionOptions {
  cwd: string;
  /** The entry's port (0 or unset: 8080 when free, else any). */
  port?: number;
  environment?: string;
  flagsPhase?: number;
  /** Extra broker settings (tests shorten timings with them). */
  env?: Record<string, string>;
  /** The control socket's path, recorded in cluster.json for `workbench region`. */
  controlPath: string;
  log?: (line: string) => void;
}

type LinkService = RegionsState['links'][number]['service'];

interface Link {
  from: string;
  to: string;
  service: LinkService;
  proxy: LatencyProxy;
  upstream: string;
}

interface Region {
  name: string;
  redis: ThrowawayRedis;
  postgres?: PostgresPrimary | PostgresReplica;
  lbPort: number;
  lb?: ChildProcess;
}

const PHASE = 4;

export class RegionSimulation {
  private readonly links: Link[] = [];
  private readonly regions = new Map<string, Region>();
  private readonly cleanups: Array<() => void> = [];
  private primaryRegion: string;
  private stopping: Promise<void> | undefined;
  private seed = 1;

  private constructor(
    private readonly options: SimulationOptions,
    private readonly layout: Layout,
  ) {
    this.primaryRegion = layout.regions[0]!.name;
  }

  private get say(): (line: string) => void {
    return this.options.log ?? (() => {});
  }

  /** Starts the whole simulation; on any failure, stops what it started and rethrows. */
  static async start(options: SimulationOptions): Promise<RegionSimulation> {
    const phaseFile = join(packageRoot(), 'phases', `phase${PHASE}`, 'traefik.yml');
    const layout = regionLayout(readTraefik(phaseFile), options.nodesPerRegion);
    const simulation = new RegionSimulation(options, layout);
    try {
      await simulation.startAll();
      return simulation;
    } catch (error) {
      simulation.killEverything();
      throw error;
    }
  }

  /** Registers a synchronous last-resort cleanup (exit, signal, failed start). */
  private onCleanup(cleanup: () => void): void {
    const unregister = onExit(cleanup);
    this.cleanups.push(() => {
      unregister();
      cleanup();
    });
  }

  private oneWayMs(): number {
    return this.options.rttMs / 2;
  }

  private async link(from: string, to: string, service: LinkService, upstreamPort: number): Promise<Link> {
    const proxy = await LatencyProxy.start({
      upstream: { port: upstreamPort },
      delayMs: this.oneWayMs(),
      jitterMs: this.options.jitterMs,
      seed: this.seed++,
    });
    const link = { from, to, service, proxy, upstream: `127.0.0.1:${upstreamPort}` };
    this.links.push(link);
    return link;
  }

  private linkOf(from: string, to: string, service: LinkService): Link | undefined {
    return this.links.find((l) => l.from === from && l.to === to && l.service === service);
  }

  private async startAll(): Promise<void> {
    const { cwd } = this.options;
    const { dir, flagsEnv, presetPhase } = prepareState(cwd, {
      phase: PHASE,
      environment: this.options.environment,
      flagsPhase: this.options.flagsPhase,
    });
    const [first, ...others] = this.layout.regions;
    const say = this.say;

    say(`region ${first!.name}: Postgres primary`);
    const primary = await PostgresPrimary.start();
    this.onCleanup(() => primary.destroy());
    const primaryDb = primary.server.urlOf(DATABASE_NAME);
    await ensureDatabase(primaryDb);
    await runMigrations(primaryDb);

    for (const region of this.layout.regions) {
      const redis = await ThrowawayRedis.start();
      this.onCleanup(() => {
        if (redis.pid && redis.pid > 0) killQuietly(redis.pid);
      });
      this.regions.set(region.name, { name: region.name, redis, lbPort: await freePort() });
    }
    this.regions.get(first!.name)!.postgres = primary;

    for (const region of others) {
      const replication = await this.link(region.name, first!.name, 'replication', primary.port);
      say(`region ${region.name}: streaming replica (pg_basebackup through the link)`);
      const replica = await PostgresReplica.start(primary, { via: { port: replication.proxy.port } });
      this.onCleanup(() => replica.destroy());
      this.regions.get(region.name)!.postgres = replica;
    }
    // Every region reaches the primary's Postgres and every other region's Redis and load balancer
    // (the entry lives in the first region) through a link of its own.
    for (const from of this.layout.regions) {
      for (const to of this.layout.regions) {
        if (from === to) continue;
        if (to === first) await this.link(from.name, to.name, 'postgres', primary.port);
        await this.link(from.name, to.name, 'redis', this.regions.get(to.name)!.redis.port);
      }
    }
    for (const region of others)
      await this.link(first!.name, region.name, 'lb', this.regions.get(region.name)!.lbPort);

    const base: BrokerBase = {
      cwd,
      databaseUrl: primaryDb,
      redisUrl: this.regions.get(first!.name)!.redis.url,
      redisKeyPrefix: `wb:${randomBytes(4).toString('hex')}:`,
      adminToken: randomBytes(24).toString('hex'),
      busSecret: randomBytes(32).toString('hex'),
      flagsEnv,
      flagsDir: join(dir, 'flags'),
      brokerEnv: clusterBrokerEnv(this.options.env),
    };
    const nodes: ClusterNode[] = [];
    for (const region of this.layout.regions) {
      const env = regionBrokerEnv(region.name, this.primaryRegion, this.addressesOf(region.name));
      for (const id of region.nodeIds)
        nodes.push({ id, url: `http://127.0.0.1:${await freePort()}`, pid: 0, region: region.name, env });
    }
    const startBroker = async (node: ClusterNode) => {
      const broker = spawnBroker(base, node.id, Number(new URL(node.url).port), node.env);
      node.pid = broker.pid;
      this.onCleanup(() => killQuietly(broker.pid));
      await broker.waitHealthy(60_000);
    };
    // The first node alone first: with ha.active-lease on, it holds the lease from the start (as phase 3).
    say(`brokers: ${nodes.map((n) => n.id).join(', ')}`);
    await startBroker(nodes[0]!);
    await Promise.all(nodes.slice(1).map(startBroker));

    for (const region of this.layout.regions) {
      const state = this.regions.get(region.name)!;
      const lb = startLoadBalancer('haproxy', {
        dir,
        cwd,
        name: `haproxy-${region.name}`,
        bind: `127.0.0.1:${state.lbPort}`,
        addresses: Object.fromEntries(
          nodes.filter((n) => n.region === region.name).map((n) => [n.id, n.url.replace('http://', '')]),
        ),
        traefik: regionLbConfig(region),
        phaseFile: '',
      });
      state.lb = lb;
      this.onCleanup(() => killQuietly(lb.pid!));
      await waitHealthy(`http://127.0.0.1:${state.lbPort}`, 15_000, () => lb.exitCode !== null);
    }

    const entryPort = await freePort(this.options.port ?? 8080);
    const entry = startLoadBalancer('haproxy', {
      dir,
      cwd,
      name: 'haproxy-entry',
      bind: `127.0.0.1:${entryPort}`,
      addresses: Object.fromEntries(
        this.layout.regions.map((r) => {
          const port =
            r === first
              ? this.regions.get(r.name)!.lbPort
              : this.linkOf(first!.name, r.name, 'lb')!.proxy.port;
          return [`lb-${r.name}`, `127.0.0.1:${port}`];
        }),
      ),
      traefik: entryConfig(this.layout),
      phaseFile: '',
    });
    this.onCleanup(() => killQuietly(entry.pid!));
    const entryUrl = `http://127.0.0.1:${entryPort}`;
    await waitHealthy(entryUrl, 15_000, () => entry.exitCode !== null);

    const cluster: ClusterFile = {
      phase: presetPhase,
      topology: PHASE,
      lb: { url: entryUrl, pid: entry.pid!, kind: 'haproxy' },
      nodes,
      databaseUrl: primaryDb,
      redisUrl: base.redisUrl,
      redisKeyPrefix: base.redisKeyPrefix,
      adminToken: base.adminToken,
      busSecret: base.busSecret,
      flagsEnv,
      flagsDir: base.flagsDir,
      brokerEnv: base.brokerEnv,
      regions: this.state(),
    };
    writeCluster(cwd, cluster);
    this.onCleanup(() => rmSync(clusterFilePath(cwd), { force: true }));
  }

  /**
   * Where a broker of `region` reaches each server now: the primary (directly or through its link), its
   * own replica, its own Redis and the others' (through the links). The counters stay on the first
   * region's Redis (a promotion moves the database, not the counters).
   */
  private addressesOf(region: string): RegionAddresses {
    const first = this.layout.regions[0]!.name;
    const own = this.regions.get(region)!;
    const viaLink = (to: string, service: LinkService, direct: string) =>
      to === region ? direct : this.linkOf(region, to, service)!.proxy.address;
    const pgUrl = (address: string) => `postgres://postgres@${address}/${DATABASE_NAME}`;
    const redisUrl = (address: string) => `redis://${address}`;
    const primary = this.regions.get(this.primaryRegion)!.postgres!;
    const primaryUrl = pgUrl(viaLink(this.primaryRegion, 'postgres', `127.0.0.1:${primary.port}`));
    const hasReplica = own.postgres instanceof PostgresReplica && this.primaryRegion !== region;
    return {
      primaryUrl,
      readUrl: hasReplica ? pgUrl(`127.0.0.1:${own.postgres!.port}`) : primaryUrl,
      ownRedisUrl: own.redis.url,
      remoteRedisUrls: this.layout.regions
        .filter((r) => r.name !== region)
        .map((r) => redisUrl(this.linkOf(region, r.name, 'redis')!.proxy.address)),
      countersRedisUrl: redisUrl(viaLink(first, 'redis', `127.0.0.1:${this.regions.get(first)!.redis.port}`)),
    };
  }

  /** What cluster.json says about the regions now. */
  state(): RegionsState {
    return {
      supervisor: { pid: process.pid, control: this.options.controlPath },
      rttMs: this.options.rttMs,
      jitterMs: this.options.jitterMs,
      primaryRegion: this.primaryRegion,
      list: this.layout.regions.map(({ name }) => {
        const region = this.regions.get(name)!;
        const postgres = region.postgres!;
        return {
          name,
          lb: { url: `http://127.0.0.1:${region.lbPort}`, pid: region.lb?.pid ?? 0 },
          redis: { url: region.redis.url, pid: region.redis.pid ?? 0 },
          postgres: {
            role: this.stoppedPostgres.has(name)
              ? 'stopped'
              : name === this.primaryRegion
                ? 'primary'
                : 'replica',
            url: postgres.server.urlOf(DATABASE_NAME),
            dataDir: postgres.dataDir,
          },
        };
      }),
      links: this.links.map((l) => ({
        from: l.from,
        to: l.to,
        service: l.service,
        address: l.proxy.address,
        upstream: l.upstream,
        cut: l.proxy.isCut,
      })),
    };
  }

  private readonly stoppedPostgres = new Set<string>();

  private saveState(patch: Partial<ClusterFile> = {}): void {
    const cluster = readCluster(this.options.cwd);
    if (cluster) writeCluster(this.options.cwd, { ...cluster, ...patch, regions: this.state() });
  }

  private region(name: string): Region {
    const region = this.regions.get(name);
    if (!region) throw new Error(`no region "${name}" (regions: ${[...this.regions.keys()].join(', ')})`);
    return region;
  }

  /**
   * Cuts every link into and out of `region` (its database and Redis connections to the others, the
   * entry's route to its load balancer, its replication): bytes held, new connections hanging, as a pulled
   * cable between regions. Returns how many links were cut.
   */
  cut(name: string): number {
    this.region(name);
    const links = this.links.filter((l) => l.from === name || l.to === name);
    for (const link of links) link.proxy.cut();
    this.saveState();
    return links.length;
  }

  restore(name: string): number {
    this.region(name);
    const links = this.links.filter((l) => l.from === name || l.to === name);
    for (const link of links) link.proxy.restore();
    this.saveState();
    return links.length;
  }

  /** Crashes the primary's Postgres (an immediate stop: no checkpoint, every session cut). */
  killPrimary(): string {
    const region = this.primaryRegion;
    this.region(region).postgres!.server.stop();
    this.stoppedPostgres.add(region);
    this.saveState();
    return region;
  }

  /**
   * Promotes `name`'s replica to the primary, fences the old primary (stopped, if it still runs: two
   * primaries is the split brain), points every region's brokers at the new primary (the others through a
   * new link) and restarts them (a drain each, in parallel). What is lost is what the replica had not
   * replayed when the old primary stopped: asynchronous replication.
   */
  async promote(name: string): Promise<{ promotedMs: number; restartedMs: number }> {
    const region = this.region(name);
    if (!(region.postgres instanceof PostgresReplica) || name === this.primaryRegion)
      throw new Error(
        `region ${name} has no replica to promote (the primary is in region ${this.primaryRegion})`,
      );
    const started = performance.now();
    const old = this.primaryRegion;
    if (!this.stoppedPostgres.has(old)) {
      this.region(old).postgres!.server.stop();
      this.stoppedPostgres.add(old);
    }
    await region.postgres.promote();
    const promotedMs = performance.now() - started;
    this.primaryRegion = name;
    for (const other of this.layout.regions) {
      if (other.name !== name && !this.linkOf(other.name, name, 'postgres'))
        await this.link(other.name, name, 'postgres', region.postgres.port);
    }
    const cluster = readCluster(this.options.cwd);
    if (!cluster) throw new Error('cluster.json is gone');
    const nodes = cluster.nodes.map((node) => ({
      ...node,
      env: {
        ...node.env,
        ...regionBrokerEnv(node.region!, this.primaryRegion, this.addressesOf(node.region!)),
      },
    }));
    this.saveState({ nodes, databaseUrl: region.postgres.server.urlOf(DATABASE_NAME) });
    const { cwd } = this.options;
    await Promise.all(nodes.map((node) => stopNode(cwd, node.id, 'SIGTERM')));
    await Promise.all(nodes.map((node) => startNode(cwd, node.id)));
    for (const node of readCluster(cwd)?.nodes ?? []) this.onCleanup(() => killQuietly(node.pid));
    return { promotedMs, restartedMs: performance.now() - started };
  }

  /**
   * Stops everything, in order: brokers drain (SIGTERM, SIGKILL after 12 s), then the load balancers, the
   * links, Redis and Postgres servers (their folders removed), and cluster.json.
   */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      const nodes = readCluster(this.options.cwd)?.nodes ?? [];
      await Promise.all(nodes.map((node) => stopProcess(node.pid, 12_000)));
      await Promise.all(this.links.map((l) => l.proxy.close()));
      this.killEverything();
    })();
    return this.stopping;
  }

  /** Every registered cleanup, newest first: processes killed, servers and folders removed. */
  private killEverything(): void {
    for (const cleanup of this.cleanups.splice(0).reverse()) {
      try {
        cleanup();
      } catch {
        // best effort: the next one still runs
      }
    }
    for (const link of this.links) void link.proxy.close();
  }
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

/** Whether `pid` still runs `command` (a pid in cluster.json may have been reused since). */
function runs(pid: number, command: RegExp): boolean {
  try {
    return command.test(readFileSync(`/proc/${pid}/cmdline`, 'utf8'));
  } catch {
    return false;
  }
}

/**
 * After a supervisor that died without cleaning up (SIGKILL): stops what cluster.json says it left, the
 * regions' Redis and load balancers by pid, the throw-away Postgres servers by their postmaster.pid
 * (SIGQUIT: an immediate shutdown), and removes the servers' folders.
 */
export async function reapRegions(state: RegionsState): Promise<void> {
  for (const region of state.list) {
    if (region.redis.pid > 0 && runs(region.redis.pid, /redis-server/)) killQuietly(region.redis.pid);
    if (region.lb.pid > 0 && runs(region.lb.pid, /haproxy/)) killQuietly(region.lb.pid);
    const pidFile = join(region.postgres.dataDir, 'postmaster.pid');
    if (existsSync(pidFile)) {
      const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
      if (pid > 0 && runs(pid, /postgres/)) {
        try {
          process.kill(pid, 'SIGQUIT');
        } catch {
          // already gone
        }
        const deadline = Date.now() + 5000;
        while (runs(pid, /postgres/) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      }
    }
    // The server's own folder (wb-pg-…), parent of its data folder: never anything above it.
    const folder = dirname(region.postgres.dataDir);
    if (/\/wb-pg-[^/]+$/.test(folder)) rmSync(folder, { recursive: true, force: true });
  }
}
