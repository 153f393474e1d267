/**
 * Phase 4's two-region simulation on one machine (docs/multi-region.md § The simulated topology): a
 * Patroni per region running that region's Postgres (./database.ts: the leader elected through a
 * throw-away etcd in a third, witness site, a streaming replica in every other region), a database HAProxy
 * per region routing writes to the leader and reads to the region's replica by Patroni's REST checks; a
 * throw-away Redis, brokers and an HAProxy per region; the weighted entry (in region A) in front of the
 * regions' load balancers. Every connection that crosses regions (or reaches etcd) goes through a
 * LatencyProxy (cli/proxies/latency-proxy.ts), one per (from, to, service), so a region can be cut off and
 * restored.
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
import { BROKER_ROLE, databaseUrlAs } from '../../../broker/db/roles.js';
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
  clusterFileOf,
  clusterFilePath,
  prepareState,
  type RegionsState,
  readCluster,
  spawnBroker,
  startLoadBalancer,
  stopProcess,
  writeCluster,
} from '../local.js';
import { killMember, switchOver } from '../patroni.js';
import { BROKER_REDIS_USER } from '../private-redis.js';
import { brokerAclUser, newRedisPassword } from '../redis-acl.js';
import { readTraefik } from '../traefik.js';
import { DATABASE_NAME, type DatabaseLinks, RegionDatabases } from './database.js';
import {
  entryConfig,
  type Layout,
  type RegionAddresses,
  type RegionOptions,
  regionBrokerEnv,
  regionLayout,
  regionLbConfig,
} from './topology.js';

export { DATABASE_NAME };

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
  lbPort: number;
  lb?: ChildProcess;
}

const PHASE = 4;
/** The site of etcd, the third vote: a region cut off from it loses the leader key. */
export const WITNESS = 'witness';
/** How often cluster.json's view of Patroni's roles is refreshed. */
const ROLE_REFRESH_MS = 1000;

export class RegionSimulation {
  private readonly links: Link[] = [];
  private readonly regions = new Map<string, Region>();
  private readonly cleanups: Array<() => void> = [];
  private databases: RegionDatabases | undefined;
  private refresher: NodeJS.Timeout | undefined;
  private stopping: Promise<void> | undefined;
  private seed = 1;
  /** The brokers' Redis password, the same on every region's server. */
  private redisPassword = '';

  private constructor(
    private readonly options: SimulationOptions,
    private readonly layout: Layout,
  ) {}

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

  private get db(): RegionDatabases {
    if (!this.databases) throw new Error("the regions' databases are not started");
    return this.databases;
  }

  private async startAll(): Promise<void> {
    const { cwd } = this.options;
    const { dir, flagsEnv, presetPhase } = prepareState(cwd, {
      phase: PHASE,
      environment: this.options.environment,
      flagsPhase: this.options.flagsPhase,
    });
    const [first, ...others] = this.layout.regions;
    const links: DatabaseLinks = {
      link: async (from, to, service, port) => (await this.link(from, to, service, port)).proxy.address,
      onCleanup: (cleanup) => this.onCleanup(cleanup),
      say: this.say,
    };
    this.databases = await RegionDatabases.start(
      { dir, regions: this.layout.regions.map((r) => r.name), synchronous: this.options.sync },
      links,
    );

    // Each region's Redis as `workbench up`'s own (../private-redis.ts): the default user off, the
    // brokers' user limited to the cluster's prefix, one password for the regions' servers.
    const redisKeyPrefix = `wb:${randomBytes(4).toString('hex')}:`;
    this.redisPassword = newRedisPassword();
    const users = [brokerAclUser(BROKER_REDIS_USER, this.redisPassword, redisKeyPrefix)];
    for (const region of this.layout.regions) {
      const redis = await ThrowawayRedis.start({ users });
      this.onCleanup(() => redis.killNow());
      this.regions.set(region.name, { name: region.name, redis, lbPort: await freePort() });
    }
    // Every region reaches every other region's Redis and load balancer (the entry lives in the first
    // region) through a link of its own.
    for (const from of this.layout.regions) {
      for (const to of this.layout.regions) {
        if (from !== to) await this.link(from.name, to.name, 'redis', this.regions.get(to.name)!.redis.port);
      }
    }
    for (const region of others)
      await this.link(first!.name, region.name, 'lb', this.regions.get(region.name)!.lbPort);

    const databaseUrl = this.db.writeUrl(first!.name);
    const base: BrokerBase = {
      cwd,
      databaseUrl,
      // As phase 3's: the least-privilege role (the region's nodes get their own URLs as it too).
      brokerDatabaseUrl: databaseUrlAs(databaseUrl, BROKER_ROLE),
      redisUrl: this.redisUrlOf(first!.name),
      redisKeyPrefix,
      adminToken: randomBytes(24).toString('hex'),
      busSecret: randomBytes(32).toString('hex'),
      flagsEnv,
      flagsDir: join(dir, 'flags'),
      brokerEnv: clusterBrokerEnv(this.options.env),
    };
    const nodes = await this.startBrokers(base);
    await this.startBalancers(dir, nodes);
    const entry = await this.startEntry(dir);

    const cluster = clusterFileOf(base, {
      phase: presetPhase,
      topology: PHASE,
      lb: { url: entry.url, pid: entry.pid, kind: 'haproxy' },
      nodes,
      regions: this.state(),
    });
    writeCluster(cwd, cluster);
    this.onCleanup(() => rmSync(clusterFilePath(cwd), { force: true }));
    this.refresher = setInterval(() => void this.refreshRoles(), ROLE_REFRESH_MS);
    this.refresher.unref();
  }

  private async startBrokers(base: BrokerBase): Promise<ClusterNode[]> {
    const nodes: ClusterNode[] = [];
    for (const region of this.layout.regions) {
      const env = regionBrokerEnv(region.name, this.layout.regions[0]!.name, this.addressesOf(region.name));
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
    this.say(`brokers: ${nodes.map((n) => n.id).join(', ')}`);
    await startBroker(nodes[0]!);
    await Promise.all(nodes.slice(1).map(startBroker));
    return nodes;
  }

  private async startBalancers(dir: string, nodes: ClusterNode[]): Promise<void> {
    const { cwd } = this.options;
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
  }

  private async startEntry(dir: string): Promise<{ url: string; pid: number }> {
    const [first] = this.layout.regions;
    const entryPort = await freePort(this.options.port ?? 8080);
    const entry = startLoadBalancer('haproxy', {
      dir,
      cwd: this.options.cwd,
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
    const url = `http://127.0.0.1:${entryPort}`;
    await waitHealthy(url, 15_000, () => entry.exitCode !== null);
    return { url, pid: entry.pid! };
  }

  /**
   * Where a broker of `region` reaches each server: the database through its own region's database
   * HAProxy (writes to Patroni's leader wherever it is, reads to the region's replica), its own Redis and
   * the others' (through the links). The counters stay on the first region's Redis (a failover moves the
   * database, not the counters).
   */
  private addressesOf(region: string): RegionAddresses {
    const first = this.layout.regions[0]!.name;
    const redisUrl = (address: string) => `redis://${BROKER_REDIS_USER}:${this.redisPassword}@${address}`;
    const counters =
      region === first
        ? this.redisUrlOf(region)
        : redisUrl(this.linkOf(region, first, 'redis')!.proxy.address);
    return {
      primaryUrl: databaseUrlAs(this.db.writeUrl(region), BROKER_ROLE),
      readUrl: databaseUrlAs(this.db.readUrl(region), BROKER_ROLE),
      ownRedisUrl: this.redisUrlOf(region),
      remoteRedisUrls: this.layout.regions
        .filter((r) => r.name !== region)
        .map((r) => redisUrl(this.linkOf(region, r.name, 'redis')!.proxy.address)),
      countersRedisUrl: counters,
    };
  }

  /** The URL of `region`'s own Redis as the brokers' user. */
  private redisUrlOf(region: string): string {
    return this.regions.get(region)!.redis.urlAs(BROKER_REDIS_USER, this.redisPassword);
  }

  /** What cluster.json says about the regions now (Patroni's roles as last refreshed). */
  state(): RegionsState {
    const db = this.db;
    return {
      supervisor: { pid: process.pid, control: this.options.controlPath },
      rttMs: this.options.rttMs,
      jitterMs: this.options.jitterMs,
      primaryRegion: db.leader ?? '',
      synchronous: this.options.sync,
      etcd: db.etcdState(),
      list: this.layout.regions.map(({ name }) => {
        const region = this.regions.get(name)!;
        return {
          name,
          lb: { url: `http://127.0.0.1:${region.lbPort}`, pid: region.lb?.pid ?? 0 },
          redis: { url: this.redisUrlOf(name), pid: region.redis.pid ?? 0 },
          ...db.regionState(name),
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

  private saveState(patch: Partial<ClusterFile> = {}): void {
    if (this.stopping) return;
    const cluster = readCluster(this.options.cwd);
    if (cluster) writeCluster(this.options.cwd, { ...cluster, ...patch, regions: this.state() });
  }

  /** Asks every Patroni for its role; cluster.json is rewritten when anything changed. */
  private async refreshRoles(): Promise<void> {
    if (await this.db.refresh()) this.saveState();
  }

  private region(name: string): Region {
    const region = this.regions.get(name);
    if (!region) throw new Error(`no region "${name}" (regions: ${[...this.regions.keys()].join(', ')})`);
    return region;
  }

  private linksOf(name: string, service?: string): Link[] {
    this.region(name);
    const services = new Set(this.links.map((l) => l.service));
    if (service !== undefined && !services.has(service as LinkService))
      throw new Error(`no link service "${service}" (services: ${[...services].join(', ')})`);
    return this.links.filter(
      (l) => (l.from === name || l.to === name) && (service === undefined || l.service === service),
    );
  }

  /**
   * Cuts every link into and out of `region` (its database and Redis connections to the others, the
   * entry's route to its load balancer, its replication, its Patroni's etcd connection), or only those of
   * one `service` (`etcd`: the region's Patroni loses the leader key while everything else still flows):
   * bytes held, new connections hanging, as a pulled cable. Returns how many links were cut.
   */
  cut(name: string, service?: string): number {
    const links = this.linksOf(name, service);
    for (const link of links) link.proxy.cut();
    this.saveState();
    return links.length;
  }

  restore(name: string, service?: string): number {
    const links = this.linksOf(name, service);
    for (const link of links) link.proxy.restore();
    this.saveState();
    return links.length;
  }

  /**
   * Crashes the leader's node: its Patroni and its Postgres SIGKILLed (Patroni alone would restart a
   * killed Postgres in place). The leader key expires after Patroni's ttl, and the replica takes it.
   */
  async killPrimary(): Promise<string> {
    await this.db.refresh();
    const region = this.db.killLeader();
    this.saveState();
    return region;
  }

  /**
   * A switchover to `name` (Patroni demotes the leader cleanly and promotes `name`'s replica), or a
   * failover when the leader is down. Brokers are not restarted: their database HAProxy follows the
   * leader by Patroni's /primary check and cuts their sessions to the old one.
   */
  async promote(name: string): Promise<{ promotedMs: number; from: string }> {
    this.region(name);
    await this.db.refresh();
    const from = this.db.leader ?? '';
    if (from === name) throw new Error(`region ${name} already holds the leader key`);
    const started = performance.now();
    await switchOver(from ? this.db.member(from) : undefined, this.db.member(name));
    await this.db.refresh();
    this.saveState();
    return { promotedMs: performance.now() - started, from };
  }

  /** Starts a killed region's Patroni again: it rejoins as a replica of the leader (pg_rewind). */
  async rejoin(name: string): Promise<{ rejoinedMs: number; timeline: number | null }> {
    this.region(name);
    const started = performance.now();
    await this.db.member(name).restart();
    await this.db.refresh();
    this.saveState();
    return { rejoinedMs: performance.now() - started, timeline: this.db.regionState(name).patroni.timeline };
  }

  /** Patroni's view of every member (`workbench region status`). */
  async status(): Promise<unknown> {
    await this.db.refresh();
    this.saveState();
    return this.db.status();
  }

  /**
   * Stops everything, in order: brokers drain (SIGTERM, SIGKILL after 12 s), then the load balancers, the
   * links, Redis and Postgres servers (their folders removed), and cluster.json.
   */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      clearInterval(this.refresher);
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
 * regions' Redis, load balancers and database HAProxies by pid, each Patroni and its Postgres (the
 * postmaster by its postmaster.pid, with its backends), etcd, and removes the servers' folders.
 */
export async function reapRegions(state: RegionsState): Promise<void> {
  for (const region of state.list) {
    if (region.redis.pid > 0 && runs(region.redis.pid, /redis-server/)) killQuietly(region.redis.pid);
    if (region.lb.pid > 0 && runs(region.lb.pid, /haproxy/)) killQuietly(region.lb.pid);
    if (region.pgLb?.pid > 0 && runs(region.pgLb.pid, /haproxy/)) killQuietly(region.pgLb.pid);
    const patroni = region.patroni?.pid > 0 && runs(region.patroni.pid, /patroni/) ? region.patroni.pid : 0;
    const pidFile = join(region.postgres.dataDir, 'postmaster.pid');
    const postmaster = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').split('\n')[0]) : 0;
    killMember(patroni, runs(postmaster, /postgres/) ? region.postgres.dataDir : '/nonexistent');
    const deadline = Date.now() + 5000;
    while (runs(postmaster, /postgres/) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    // The server's own folder (wb-pg-…), parent of its data folder: never anything above it.
    const folder = dirname(region.postgres.dataDir);
    if (/\/wb-pg-[^/]+$/.test(folder)) rmSync(folder, { recursive: true, force: true });
  }
  if (state.etcd?.pid > 0 && runs(state.etcd.pid, /etcd/)) killQuietly(state.etcd.pid);
  if (state.etcd?.dataDir && /\/etcd$/.test(state.etcd.dataDir))
    rmSync(state.etcd.dataDir, { recursive: true, force: true });
}
