/**
 * A local cluster for a phase, run natively: K broker processes (compiled JS), the machine's Postgres (a
 * database of its own), a Redis of its own with an ACL user (./private-redis.ts; or the one named with
 * --redis-url / REDIS_URL, a key prefix of its own there), and a load balancer running the phase's Traefik file:
 * Traefik itself when a `traefik` binary is on PATH, else HAProxy configured from it. Its
 * state lives in `.workbench/` of the working directory: cluster.json, logs, the flags of the running
 * environment (a copy of the phase preset, so flips never edit the repository's files). The folder and its
 * logs are the owner's only (0700/0600): cluster.json holds the admin token, and a log may hold what a
 * process printed (other accounts of the machine must not read either).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  existsSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { ensureDatabase, runMigrations } from '../../broker/db/migrate.js';
import { BROKER_ROLE, databaseUrlAs } from '../../broker/db/roles.js';
import { packageRoot } from '../../broker/paths.js';
import { parseRedisClusterNodes } from '../../broker/redis/cluster-nodes.js';
import { UsageError } from '../args.js';
import { DEFAULT_REDIS_URL } from '../database.js';
import { freePort } from '../ports.js';
import { BrokerProcess } from './broker-process.js';
import { haproxyConfig } from './haproxy.js';
import { waitHealthy } from './health.js';
import { type PrivateRedis, startPrivateRedis } from './private-redis.js';
import { removePrometheusTargets, writePrometheusTargets } from './prometheus-targets.js';
import {
  clusterFilePath,
  ensurePrivateStateDir,
  openPrivateLog,
  PRIVATE_FILE,
  stateDir,
} from './state-dir.js';
import { readTraefik, type TraefikConfig } from './traefik.js';
import { chooseLoadBalancer, localDynamicConfig, localStaticConfig } from './traefik-local.js';

export interface ClusterFile {
  /** The phase whose flags the cluster started with (promotions move it on; see `workbench status`). */
  phase: number;
  /** The phase whose topology (Traefik file, node count) the cluster runs. */
  topology: number;
  /** The load balancer: HAProxy generated from the phase's Traefik file, or Traefik running it as is. */
  lb: { url: string; pid: number; kind?: 'haproxy' | 'traefik' };
  nodes: ClusterNode[];
  /** The owner's connection: migrations, the workbench's own commands. */
  databaseUrl: string;
  /**
   * The brokers' connection, as the least-privilege role (docs/design.md § Database roles); absent in the
   * cluster file of an older release: `databaseUrl`.
   */
  brokerDatabaseUrl?: string;
  redisUrl: string;
  redisKeyPrefix: string;
  /**
   * The cluster's own redis-server, when `up` named no Redis (./private-redis.ts): its pid (`down` stops
   * it) and its configuration file (0600, it holds the brokers' password; `down` removes it).
   */
  redisServer?: { pid: number; configFile: string };
  adminToken: string;
  /**
   * The cluster's BUS_SECRET, random per cluster (docs/design.md § The bus envelope): handed to each broker
   * in its environment, never on a command line; kept here (a private file) so a restarted node gets it.
   */
  busSecret: string;
  flagsEnv: string;
  flagsDir: string;
  /** Broker settings the nodes started with beyond the cluster's own, so a restarted node gets them again. */
  brokerEnv: Record<string, string>;
  /**
   * Phase 4's two-region simulation only (cli/cluster/regions/): the process that holds the links, the
   * regions' load balancers, Redis and Postgres servers. `lb` is then the weighted entry.
   */
  regions?: RegionsState;
}

export interface ClusterNode {
  id: string;
  url: string;
  pid: number;
  /** Phase 4: the node's region, and the settings that differ per region (database, Redis, REGION). */
  region?: string;
  env?: Record<string, string>;
}

/** What cluster.json says about the simulated regions (written by cli/cluster/regions/simulation.ts). */
export interface RegionsState {
  /** The `workbench up --phase 4` process running the simulation, and its control socket. */
  supervisor: { pid: number; control: string };
  rttMs: number;
  jitterMs: number;
  /** The region whose Postgres takes the writes: Patroni's leader, as last seen (empty: none now). */
  primaryRegion: string;
  /** Patroni's synchronous mode (`up --phase 4 --sync`). */
  synchronous: boolean;
  /** The etcd holding Patroni's leader key (the witness site: every region reaches it through a link). */
  etcd: { url: string; pid: number; dataDir: string };
  list: Array<{
    name: string;
    lb: { url: string; pid: number };
    redis: { url: string; pid: number };
    postgres: { role: 'primary' | 'replica' | 'stopped'; url: string; dataDir: string };
    /** The region's Patroni (its REST API) and its database HAProxy (write and read frontends). */
    patroni: { pid: number; rest: string; timeline: number | null };
    pgLb: { pid: number; writeUrl: string; readUrl: string };
  }>;
  /** Every cross-region link: who connects (`from`) to what of the other region (`to`, `service`). */
  links: Array<{
    from: string;
    to: string;
    service: 'postgres' | 'replication' | 'redis' | 'lb' | 'patroni' | 'etcd';
    address: string;
    upstream: string;
    cut: boolean;
  }>;
}

/**
 * Broker settings taken from the caller's environment when a cluster starts (timings, limits): recorded in
 * cluster.json, so `workbench node start` in another shell starts a node exactly like its siblings.
 */
const TUNABLE_BROKER_SETTINGS = [
  'LOG_LEVEL',
  'HEARTBEAT_MS',
  'MAX_FRAME_BYTES',
  'MAX_BODY_BYTES',
  'HELLO_SKEW_MS',
  'PRESENCE_GRACE_MS',
  'DRAIN_TIMEOUT_MS',
  'DRAIN_CLOSE_PER_SEC',
  'MESH_CONNECTION_CAP',
  'SEND_RATE_PER_MIN',
  'SEND_BURST',
  'HOOK_RATE_PER_MIN',
  'CLOCK_TICK_MS',
  'MCP_CALL_TIMEOUT_MS',
  'SCHEDULE_MAX_PER_MEMBER',
  'WATCH_ALLOW_PRIVATE',
  'WATCH_FETCH_TIMEOUT_MS',
  'WATCH_MAX_BYTES',
  'WATCH_MAX_PER_MEMBER',
  'WATCH_MAX_PER_MESH',
  'FLAGS_POLL_MS',
  'DELIVERY_CHECK_MS',
  'BACKLOG_MAX',
  'BACKLOG_MAX_AGE_MS',
  'MESSAGE_RETENTION_MS',
  'RETENTION_INTERVAL_MS',
  'REDIS_TIMEOUT_MS',
  'NODE_DEAD_MS',
  'SCHEDULE_POLL_MS',
  'ACTIVE_LEASE_TTL_MS',
  'MCP_MAX_SERVERS_PER_MEMBER',
  'MCP_MAX_SERVERS_PER_MESH',
  'MCP_MAX_TOOLS_PER_MEMBER',
  'MCP_MAX_TOOLS_PER_MESH',
  'STREAM_MAX_SUBSCRIPTIONS_PER_SESSION',
  'HELLO_PENDING_PER_ADDRESS',
  'FRAME_RATE_PER_SEC',
  'FRAME_BURST',
  // A cluster started on a Redis Cluster: a node started again must join it too, and what publishes to the
  // nodes (the console, promotions, `flags set`) reads it from here (redis-target.ts).
  'REDIS_CLUSTER_NODES',
];

export { clusterFilePath, ensurePrivateStateDir, openPrivateLog, stateDir } from './state-dir.js';

export function readCluster(cwd = process.cwd()): ClusterFile | undefined {
  const path = clusterFilePath(cwd);
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as ClusterFile) : undefined;
}

/**
 * Whether a process the cluster started still runs. A pid in cluster.json may have been reused by an
 * unrelated process since (after a reboot, say): where /proc tells, it must still be a broker or a load
 * balancer, so `down` and `node kill` never signal a stranger.
 */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const command = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    return /main\.js\0broker|main\.js\0up\0|haproxy|traefik|redis-server/.test(command);
  } catch {
    return true; // no /proc here: trust the pid
  }
}

/** The broker hosts a phase's Traefik file routes to, in order (broker-1, broker-2, …). */
export function brokerHosts(config: TraefikConfig): string[] {
  const hosts = new Set<string>();
  for (const service of Object.values(config.services)) {
    if (service.kind === 'loadBalancer') for (const url of service.servers) hosts.add(new URL(url).hostname);
  }
  return [...hosts].sort();
}

export interface UpOptions {
  phase: number;
  nodes?: number;
  port?: number;
  databaseUrl: string;
  /**
   * The Redis the brokers use, an operator's own (already secured). Unset: the cluster starts a private
   * one with an ACL user (./private-redis.ts), unless REDIS_CLUSTER_NODES names a Redis Cluster.
   */
  redisUrl?: string;
  cwd?: string;
  log?: (line: string) => void;
  /** The flags environment of the cluster (default `phase<N>`), and whose preset it starts with. */
  environment?: string;
  flagsPhase?: number;
  /** The load balancer; by default Traefik when a `traefik` binary is on PATH, else HAProxy. */
  loadBalancer?: 'haproxy' | 'traefik';
  /** Extra environment for the brokers (tests shorten timings with it). */
  env?: Record<string, string>;
  /**
   * What the brokers connect as (default: WORKBENCH_BROKER_DATABASE_URL, else `databaseUrl` as role
   * mesh_broker, without a password); the migrations run once before, as `databaseUrl`'s role.
   */
  brokerDatabaseUrl?: string;
  /**
   * Settings of one node over the cluster's, given the URLs it would use (`workbench chaos` routes each
   * node's Postgres and Redis through proxies of its own): recorded as the node's `env`, so a restarted
   * node gets them again.
   */
  nodeEnv?: (id: string, shared: { databaseUrl: string; redisUrl: string }) => Record<string, string>;
}

/**
 * `.workbench/` (private) and the running environment's flags: a copy of the preset of `flagsPhase`
 * (default: the phase's own), so flips never edit the repository's files.
 */
export function prepareState(
  cwd: string,
  options: Pick<UpOptions, 'phase' | 'environment' | 'flagsPhase'>,
): { dir: string; flagsEnv: string; presetPhase: number } {
  const dir = ensurePrivateStateDir(cwd);
  const flagsEnv = options.environment ?? `phase${options.phase}`;
  const presetPhase = options.flagsPhase ?? options.phase;
  copyFileSync(
    join(packageRoot(), 'phases', `phase${presetPhase}`, 'flags', `phase${presetPhase}.json`),
    join(dir, 'flags', `${flagsEnv}.json`),
  );
  return { dir, flagsEnv, presetPhase };
}

/** The broker settings every node of a local cluster shares beyond its own (recorded as `brokerEnv`). */
export function clusterBrokerEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    // A local cluster runs on loopback, where every address is private: let its watches reach it.
    WATCH_ALLOW_PRIVATE: 'true',
    ...Object.fromEntries(
      TUNABLE_BROKER_SETTINGS.flatMap((name) => (process.env[name] ? [[name, process.env[name]!]] : [])),
    ),
    ...extra,
  };
}

/** Refuses to start over a cluster whose processes still run. */
export function refuseRunningCluster(cwd: string): void {
  const existing = readCluster(cwd);
  if (existing && clusterPids(existing).some(alive)) {
    throw new Error(
      `a cluster is already running here (phase ${existing.phase}, ${existing.lb.url}); run "workbench down" first`,
    );
  }
}

/** HAProxy must be installed; says how when it is not. */
export function requireHaproxy(): void {
  if (spawnSync('haproxy', ['-v']).error) {
    throw new Error(
      'HAProxy is not installed: apt-get update && apt-get install -y --no-install-recommends haproxy',
    );
  }
}

export async function up(options: UpOptions): Promise<ClusterFile> {
  const cwd = options.cwd ?? process.cwd();
  const say = options.log ?? (() => {});
  refuseRunningCluster(cwd);
  const brokerEnv = clusterBrokerEnv(options.env);
  if (brokerEnv.REDIS_CLUSTER_NODES !== undefined) {
    // Refused before any node starts, with the broker's own words (each node would stop on it).
    try {
      parseRedisClusterNodes(brokerEnv.REDIS_CLUSTER_NODES);
    } catch (error) {
      throw new UsageError(`REDIS_CLUSTER_NODES: ${(error as Error).message}`);
    }
  }
  const lbKind = chooseLoadBalancer(options.loadBalancer);
  if (lbKind === 'haproxy') requireHaproxy();
  const phaseDir = join(packageRoot(), 'phases', `phase${options.phase}`);
  if (!existsSync(phaseDir))
    throw new Error(`no phase ${options.phase} (phases/phase${options.phase} is missing)`);
  const traefik = readTraefik(join(phaseDir, 'traefik.yml'));
  const hosts = brokerHosts(traefik);
  const count = options.nodes ?? hosts.length;
  if (count < hosts.length) {
    throw new Error(
      `phase ${options.phase} routes to ${hosts.length} brokers (${hosts.join(', ')}); --nodes must be at least that`,
    );
  }
  const { dir, flagsEnv, presetPhase } = prepareState(cwd, options);

  say(`migrating ${new URL(options.databaseUrl).pathname.slice(1)}`);
  await ensureDatabase(options.databaseUrl);
  await runMigrations(options.databaseUrl);

  const redisKeyPrefix = `wb:${randomBytes(4).toString('hex')}:`;
  // Everything started here, Redis, brokers and load balancer, so a failed start leaves nothing running.
  const children: ChildProcess[] = [];
  const nodes: ClusterFile['nodes'] = [];
  const brokers: BrokerProcess[] = [];
  try {
    const redis = await clusterRedis(dir, options.redisUrl, brokerEnv, redisKeyPrefix);
    if (redis.server) children.push(redis.server.child);
    const base: BrokerBase = {
      cwd,
      databaseUrl: options.databaseUrl,
      brokerDatabaseUrl:
        options.brokerDatabaseUrl ??
        (process.env.WORKBENCH_BROKER_DATABASE_URL || databaseUrlAs(options.databaseUrl, BROKER_ROLE)),
      redisUrl: redis.url,
      redisKeyPrefix,
      adminToken: randomBytes(24).toString('hex'),
      busSecret: randomBytes(32).toString('hex'),
      flagsEnv,
      flagsDir: join(dir, 'flags'),
      brokerEnv,
    };
    const startBrokers = async (from: number, to: number) => {
      for (let i = from; i <= to; i++) {
        const id = `broker-${i}`;
        const port = await freePort();
        const env = options.nodeEnv?.(id, {
          databaseUrl: base.brokerDatabaseUrl ?? base.databaseUrl,
          redisUrl: base.redisUrl,
        });
        const broker = spawnBroker(base, id, port, env);
        brokers.push(broker);
        children.push(broker.child);
        nodes.push({ id, url: broker.url, pid: broker.pid, ...(env ? { env } : {}) });
      }
      await Promise.all(brokers.slice(from - 1).map((broker) => broker.waitHealthy(30_000)));
    };
    // broker-1 first: healthy means it has made its first claim of the active lease (when the flag is on),
    // so the primary of phase 1 holds it, and the load balancer (which follows the lease) routes to it.
    await startBrokers(1, 1);
    await startBrokers(2, count);
    say(`${nodes.length} broker node${nodes.length === 1 ? '' : 's'} healthy`);

    const lbPort = await freePort(options.port ?? 8080);
    const addresses = Object.fromEntries(nodes.map((node) => [node.id, node.url.replace('http://', '')]));
    const lb = startLoadBalancer(lbKind, {
      dir,
      cwd,
      bind: `127.0.0.1:${lbPort}`,
      addresses,
      traefik,
      phaseFile: join(phaseDir, 'traefik.yml'),
    });
    children.push(lb);
    const lbUrl = `http://127.0.0.1:${lbPort}`;
    await waitHealthy(lbUrl, 15_000, () => lb.exitCode !== null);

    const cluster = clusterFileOf(base, {
      phase: presetPhase,
      topology: options.phase,
      lb: { url: lbUrl, pid: lb.pid!, kind: lbKind },
      nodes,
      redisServer: redis.server && {
        pid: redis.server.child.pid!,
        configFile: redis.server.configFile,
      },
    });
    writeCluster(cwd, cluster);
    return cluster;
  } catch (error) {
    for (const child of children) if (child.pid && alive(child.pid)) process.kill(child.pid, 'SIGKILL');
    rmSync(join(dir, 'redis.conf'), { force: true });
    throw error;
  }
}

/**
 * The Redis of a cluster: the one named (`redisUrl`, an operator's own), the machine's default when
 * REDIS_CLUSTER_NODES names a Redis Cluster (the nodes' bus is there), else a private one started here.
 */
async function clusterRedis(
  dir: string,
  redisUrl: string | undefined,
  brokerEnv: Record<string, string>,
  prefix: string,
): Promise<{ url: string; server?: PrivateRedis }> {
  if (redisUrl !== undefined) return { url: redisUrl };
  if (brokerEnv.REDIS_CLUSTER_NODES !== undefined) return { url: DEFAULT_REDIS_URL };
  const server = await startPrivateRedis(dir, prefix);
  return { url: server.url, server };
}

/** The cluster file of a cluster (phases 0-3's `up`, phase 4's simulation): what its brokers share, and the rest. */
export function clusterFileOf(
  base: BrokerBase,
  rest: Pick<ClusterFile, 'phase' | 'topology' | 'lb' | 'nodes' | 'redisServer' | 'regions'>,
): ClusterFile {
  return {
    ...rest,
    databaseUrl: base.databaseUrl,
    brokerDatabaseUrl: base.brokerDatabaseUrl,
    redisUrl: base.redisUrl,
    redisKeyPrefix: base.redisKeyPrefix,
    adminToken: base.adminToken,
    busSecret: base.busSecret,
    flagsEnv: base.flagsEnv,
    flagsDir: base.flagsDir,
    brokerEnv: base.brokerEnv,
  };
}

/** Starts the load balancer in front of the nodes (`addresses`: broker host name → `127.0.0.1:port`). */
export function startLoadBalancer(
  kind: 'haproxy' | 'traefik',
  options: {
    dir: string;
    cwd: string;
    bind: string;
    addresses: Record<string, string>;
    traefik: TraefikConfig;
    phaseFile: string;
    /** Names its log and configuration when a cluster runs several (phase 4: `haproxy-entry`). */
    name?: string;
  },
): ChildProcess {
  const { dir, cwd, bind, addresses } = options;
  const name = options.name ?? kind;
  const log = openPrivateLog(dir, `${name}.log`);
  let args: string[];
  if (kind === 'haproxy') {
    const cfg = join(dir, `${name}.cfg`);
    writeFileSync(cfg, haproxyConfig(options.traefik, { bind, addresses }));
    const check = spawnSync('haproxy', ['-c', '-q', '-f', cfg], { encoding: 'utf8' });
    if (check.status !== 0) throw new Error(`generated HAProxy configuration is invalid:\n${check.stderr}`);
    args = ['-db', '-f', cfg];
  } else {
    const dynamicFile = join(dir, 'traefik-dynamic.yml');
    writeFileSync(dynamicFile, localDynamicConfig(readFileSync(options.phaseFile, 'utf8'), addresses));
    const staticFile = join(dir, 'traefik.yml');
    writeFileSync(staticFile, localStaticConfig({ bind, dynamicFile }));
    args = [`--configFile=${staticFile}`];
  }
  const lb = spawn(kind, args, { cwd, detached: true, stdio: ['ignore', log, log] });
  lb.unref();
  closeSync(log); // the child has its own copy; ours would leak one descriptor per start
  return lb;
}

/**
 * Written aside and renamed into place: phase 4's supervisor rewrites the file while `workbench region`
 * and tests read it, and a reader must never see it half-written.
 */
export function writeCluster(cwd: string, cluster: ClusterFile): void {
  const path = clusterFilePath(cwd);
  const aside = `${path}.${process.pid}.tmp`;
  writeFileSync(aside, `${JSON.stringify(cluster, null, 2)}\n`, { mode: PRIVATE_FILE });
  chmodSync(aside, PRIVATE_FILE); // `mode` applies only to a file writeFileSync creates
  renameSync(aside, path);
  writePrometheusTargets(cwd, cluster);
}

/** What every broker of a cluster shares; a node adds its id and port. */
export type BrokerBase = Pick<
  ClusterFile,
  | 'databaseUrl'
  | 'brokerDatabaseUrl'
  | 'redisUrl'
  | 'redisKeyPrefix'
  | 'adminToken'
  | 'busSecret'
  | 'flagsEnv'
  | 'flagsDir'
  | 'brokerEnv'
> & { cwd: string };

/**
 * One broker of the cluster (cli/cluster/broker-process.ts), detached, logging to
 * `.workbench/logs/<id>.log`; `nodeEnv` (a phase-4 node's region settings) comes last, over the cluster's.
 */
export function spawnBroker(
  base: BrokerBase,
  id: string,
  port: number,
  nodeEnv: Record<string, string> = {},
): BrokerProcess {
  return BrokerProcess.spawn({
    port,
    cwd: base.cwd,
    env: {
      ...base.brokerEnv,
      NODE_ID: id,
      DATABASE_URL: base.brokerDatabaseUrl ?? base.databaseUrl,
      REDIS_URL: base.redisUrl,
      REDIS_KEY_PREFIX: base.redisKeyPrefix,
      ADMIN_TOKEN: base.adminToken,
      BUS_SECRET: base.busSecret,
      FLAGS_ENV: base.flagsEnv,
      FLAGS_DIR: base.flagsDir,
      STATE_DIR: stateDir(base.cwd),
      ...nodeEnv,
    },
    output: openPrivateLog(stateDir(base.cwd), `${id}.log`),
    detached: true,
  });
}

function clusterNode(cwd: string, id: string): { cluster: ClusterFile; node: ClusterNode } {
  const cluster = readCluster(cwd);
  if (!cluster)
    throw new Error('no local cluster here (.workbench/cluster.json): start one with "workbench up"');
  const node = cluster.nodes.find((n) => n.id === id);
  if (!node)
    throw new Error(
      `no node "${id}" in the local cluster (nodes: ${cluster.nodes.map((n) => n.id).join(', ')})`,
    );
  return { cluster, node };
}

export async function waitExited(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (alive(pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  return !alive(pid);
}

/**
 * Stops one node of the local cluster: `SIGKILL` (a crash: no drain, nothing handed over) or `SIGTERM` (a
 * drain, SIGKILL after 12 s). Resolves once the process is gone.
 */
export async function stopNode(cwd: string, id: string, signal: 'SIGKILL' | 'SIGTERM'): Promise<void> {
  const { node } = clusterNode(cwd, id);
  if (!alive(node.pid)) return;
  process.kill(node.pid, signal);
  if (!(await waitExited(node.pid, signal === 'SIGKILL' ? 5000 : 12_000))) process.kill(node.pid, 'SIGKILL');
  await waitExited(node.pid, 5000);
}

/** Starts a stopped node again on its own port, with its siblings' settings; resolves when it is healthy. */
export async function startNode(cwd: string, id: string): Promise<void> {
  const { cluster, node } = clusterNode(cwd, id);
  if (alive(node.pid)) throw new Error(`${id} is running (pid ${node.pid})`);
  const broker = spawnBroker({ ...cluster, cwd }, id, Number(new URL(node.url).port), node.env);
  try {
    await broker.waitHealthy(30_000);
  } catch (error) {
    broker.kill();
    throw error;
  }
  // Re-read: another node may have been restarted meanwhile.
  const latest = readCluster(cwd) ?? cluster;
  writeCluster(cwd, {
    ...latest,
    nodes: latest.nodes.map((n) => (n.id === id ? { ...n, pid: broker.pid } : n)),
  });
}

/**
 * Every process of the cluster named in its file: load balancers, brokers, its own Redis, phase 4's
 * supervisor.
 */
export function clusterPids(cluster: ClusterFile): number[] {
  return [
    ...(cluster.regions
      ? [cluster.regions.supervisor.pid, ...cluster.regions.list.map((r) => r.lb.pid)]
      : []),
    cluster.lb.pid,
    ...cluster.nodes.map((n) => n.pid),
    ...(cluster.redisServer ? [cluster.redisServer.pid] : []),
  ];
}

/**
 * Kills every process the cluster's file names at once (SIGKILL), synchronously: the last-resort cleanup
 * on a process's exit (cli/cluster/exit-cleanup.ts) for a cluster that `down` never got to stop.
 */
export function killClusterNow(cwd: string): void {
  const cluster = readCluster(cwd);
  if (!cluster) return;
  for (const pid of clusterPids(cluster)) {
    if (!alive(pid)) continue; // gone, or its pid is a stranger's now
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

/**
 * Stops a process of the cluster by its pid (cluster.json's; not necessarily a child of this process):
 * SIGTERM, then SIGKILL if it still runs after `graceMs`. One that is gone already, or gone by the time
 * the SIGKILL is sent, is no error.
 */
export async function stopProcess(pid: number, graceMs: number): Promise<void> {
  if (!alive(pid)) return;
  process.kill(pid, 'SIGTERM');
  if (await waitExited(pid, graceMs)) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // exited meanwhile
  }
}

/**
 * Stops what `up` started: brokers drain (SIGTERM, then SIGKILL after 12 s), then HAProxy and the
 * cluster's own Redis (its configuration file, which holds the password, removed). Phase 4's
 * supervisor is asked to stop everything it started (its brokers, load balancers, links, throw-away
 * Postgres and Redis servers and their folders, cli/cluster/regions/simulation.ts); what it left running
 * (it was killed) is stopped here by pid.
 */
export async function down(cwd = process.cwd()): Promise<ClusterFile | undefined> {
  const cluster = readCluster(cwd);
  if (!cluster) return undefined;
  if (cluster.regions) await stopProcess(cluster.regions.supervisor.pid, 40_000);
  const latest = readCluster(cwd) ?? cluster; // the supervisor removes the file once it is done
  await Promise.all(latest.nodes.map((node) => stopProcess(node.pid, 12_000)));
  await Promise.all(clusterPids(latest).map((pid) => stopProcess(pid, 5000)));
  if (latest.redisServer) rmSync(latest.redisServer.configFile, { force: true });
  rmSync(clusterFilePath(cwd), { force: true });
  removePrometheusTargets(cwd);
  return cluster;
}
