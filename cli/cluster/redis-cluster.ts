/**
 * A throw-away Redis Cluster for the tests and the fan-out benchmark (docs/redis-cluster.md): three masters,
 * each with one replica, of `redis-server` processes on free loopback ports, in a temporary folder (each
 * node's settings and cluster config file only, no persistence), joined with `redis-cli --cluster create`. `stop()` kills every process
 * and removes the folder. A short `cluster-node-timeout` lets a killed master's replica take over within
 * seconds (`killMasterOf`).
 *
 * Optionally secured as a production cluster would be (docs/design.md § 10): `users` (ACL lines) turns the
 * `default` user off and adds a cluster administrator of its own, with a random password, that the replicas
 * replicate as (`masteruser`/`masterauth`) and that redis-cli (create, the checks here) runs as; `tls` makes
 * every node TLS-only for clients, the cluster bus and replication. Each node's settings are in a private
 * file (0600), so no password is on a command line; redis-cli takes the administrator's from REDISCLI_AUTH.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Cluster, type RedisOptions } from 'ioredis';
import { freePort } from '../ports.js';
import { newRedisPassword } from './redis-acl.js';

const run = promisify(execFile);

/** How long a master may be unreachable before its replica is promoted. */
const NODE_TIMEOUT_MS = 1000;

interface ServerProcess {
  port: number;
  child: ChildProcess;
}

export interface ClusterNodeInfo {
  id: string;
  port: number;
  role: 'master' | 'replica';
  /** A replica's master (its id). */
  masterId?: string;
  /** Whether the cluster marks it failed. */
  failed: boolean;
  /** A master's slot ranges, inclusive. */
  slots: Array<[number, number]>;
}

/** A node's certificate and key and the CA that signs every node's (tests/helpers/tls.ts makes them). */
export interface ClusterTls {
  certFile: string;
  keyFile: string;
  caFile: string;
}

export interface ThrowawayRedisClusterOptions {
  masters?: number;
  replicasPerMaster?: number;
  /** ACL lines (`user … on >pw …`) of the users clients connect as; given, the `default` user is off. */
  users?: string[];
  /** Every node TLS-only: clients, the cluster bus and replication, each node with this certificate. */
  tls?: ClusterTls;
}

/** The cluster's own administrator (secured clusters only): creates the cluster, replicates, answers checks. */
const ADMIN_USER = 'wb-cluster-admin';

/** How redis-cli reaches a node: its arguments (user, TLS) and environment (the password). */
interface CliAccess {
  args: string[];
  env: NodeJS.ProcessEnv | undefined;
}

/** The administrator's password, the ACL lines and the TLS files of a secured cluster. */
interface Security {
  adminPassword: string;
  users: string[];
  tls: ClusterTls | undefined;
}

export class ThrowawayRedisCluster {
  private readonly access: CliAccess;

  private constructor(
    private readonly dir: string,
    private readonly servers: ServerProcess[],
    private readonly security: Security | undefined,
  ) {
    this.access = cliAccess(security);
  }

  /** Starts 3 masters + 3 replicas and waits until every node reports `cluster_state:ok`. */
  static async start(options: ThrowawayRedisClusterOptions = {}): Promise<ThrowawayRedisCluster> {
    const masters = options.masters ?? 3;
    const replicas = options.replicasPerMaster ?? 1;
    const dir = mkdtempSync(join(tmpdir(), 'wb-redis-cluster-'));
    const secured = options.users !== undefined || options.tls !== undefined;
    const security = secured
      ? { adminPassword: newRedisPassword(), users: options.users ?? [], tls: options.tls }
      : undefined;
    const cluster = new ThrowawayRedisCluster(dir, [], security);
    try {
      for (let i = 0; i < masters * (1 + replicas); i++)
        cluster.servers.push(await startServer(dir, cluster.access, security));
      const addresses = cluster.servers.map((server) => `127.0.0.1:${server.port}`);
      await cliRun(cluster.access, [
        '--cluster',
        'create',
        ...addresses,
        '--cluster-replicas',
        String(replicas),
        '--cluster-yes',
      ]);
      await cluster.waitUntilHealthy();
      return cluster;
    } catch (error) {
      await cluster.stop();
      throw error;
    }
  }

  /** REDIS_CLUSTER_NODES for a broker: every node, so a client finds the cluster whichever is down. */
  get nodesVariable(): string {
    return this.servers.map((server) => `127.0.0.1:${server.port}`).join(',');
  }

  /** The redis-server processes' pids (a benchmark counts their CPU time). */
  get pids(): number[] {
    return this.servers.map((server) => server.child.pid!).filter(Boolean);
  }

  get seedNodes(): Array<{ host: string; port: number }> {
    return this.servers.map((server) => ({ host: '127.0.0.1', port: server.port }));
  }

  /** The cluster's view of its nodes, as one live node reports it (CLUSTER NODES). */
  async nodes(): Promise<ClusterNodeInfo[]> {
    for (const server of this.running()) {
      try {
        return parseClusterNodes(await cli(this.access, server.port, 'cluster', 'nodes'));
      } catch {
        // that node does not answer: ask the next one
      }
    }
    throw new Error('no node of the Redis Cluster answers');
  }

  /** Whether the nodes speak TLS only (then connect with `connectionOptions`'s CA). */
  get tls(): boolean {
    return this.security?.tls !== undefined;
  }

  /**
   * What a client of any node needs besides the address: `user`'s credentials (none given, on a secured
   * cluster: its administrator's) and, on a TLS cluster, the CA to check the nodes' certificate with.
   */
  connectionOptions(user?: { username: string; password: string }): RedisOptions {
    const security = this.security;
    if (!security) return user ?? {};
    const tls = security.tls ? { tls: { ca: readFileSync(security.tls.caFile, 'utf8') } } : {};
    return { ...(user ?? { username: ADMIN_USER, password: security.adminPassword }), ...tls };
  }

  /** A cluster client (tests' own checks; the administrator on a secured cluster); disconnect it after use. */
  client(user?: { username: string; password: string }): Cluster {
    const client = new Cluster(this.seedNodes, {
      clusterRetryStrategy: () => 200,
      redisOptions: this.connectionOptions(user),
    });
    client.on('error', () => {});
    return client;
  }

  /** One command on the node at `port` (redis-cli --raw), its answer's lines. */
  async command(port: number, ...args: string[]): Promise<string[]> {
    return (await cli(this.access, port, '--raw', ...args)).split('\n').filter(Boolean);
  }

  /** Every key matching `pattern`, from every master (KEYS on a cluster answers for one node only). */
  async keys(pattern: string): Promise<string[]> {
    const masters = (await this.nodes()).filter((node) => node.role === 'master' && !node.failed);
    const lists = await Promise.all(masters.map((node) => this.command(node.port, 'keys', pattern)));
    return lists.flat().sort();
  }

  /**
   * Kills (SIGKILL) the master that owns `slot` and resolves once its replica was promoted and the cluster
   * is healthy again: the dead master's port and the promoted replica's.
   */
  async killMasterOf(slot: number): Promise<{ killed: number; promoted: number }> {
    const owner = await this.masterOfSlot(slot);
    const before = await this.nodes();
    const master = before.find((node) => node.port === owner)!;
    const replica = before.find((node) => node.role === 'replica' && node.masterId === master.id);
    if (!replica) throw new Error(`master on port ${owner} has no replica to take over`);
    const server = this.servers.find((entry) => entry.port === owner)!;
    await kill(server.child);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const now = await this.nodes().catch(() => []);
      const promoted = now.find((node) => node.id === replica.id);
      if (promoted?.role === 'master' && (await this.healthyWithout(owner))) break;
      if (Date.now() > deadline)
        throw new Error(`replica on port ${replica.port} was not promoted within 30 s`);
      await sleep(100);
    }
    return { killed: owner, promoted: replica.port };
  }

  /**
   * Kills the master that owns `slot` and its replicas, and resolves once the other nodes report the
   * cluster down (`cluster_state:fail`, their answer to every command while a slot has no master).
   */
  async killShardOf(slot: number): Promise<number[]> {
    const owner = await this.masterOfSlot(slot);
    const nodes = await this.nodes();
    const master = nodes.find((node) => node.port === owner)!;
    const ports = [owner, ...nodes.filter((node) => node.masterId === master.id).map((node) => node.port)];
    await Promise.all(
      this.servers.filter((server) => ports.includes(server.port)).map(({ child }) => kill(child)),
    );
    // The rest notice after cluster-node-timeout; from then on they refuse every command (CLUSTERDOWN).
    const deadline = Date.now() + 30_000;
    for (;;) {
      const states = await Promise.all(
        this.running().map((server) => cli(this.access, server.port, 'cluster', 'info').catch(() => '')),
      );
      if (states.every((state) => state.includes('cluster_state:fail'))) break;
      if (Date.now() > deadline)
        throw new Error('the Redis Cluster did not report cluster_state:fail within 30 s');
      await sleep(100);
    }
    return ports;
  }

  /** The port of the master that owns `slot` now. */
  async masterOfSlot(slot: number): Promise<number> {
    const owner = (await this.nodes()).find(
      (node) =>
        node.role === 'master' && !node.failed && node.slots.some(([from, to]) => slot >= from && slot <= to),
    );
    if (!owner) throw new Error(`no master owns slot ${slot}`);
    return owner.port;
  }

  async stop(): Promise<void> {
    await Promise.all(this.servers.map((server) => kill(server.child)));
    rmSync(this.dir, { recursive: true, force: true });
  }

  private running(): ServerProcess[] {
    return this.servers.filter(
      (server) => server.child.exitCode === null && server.child.signalCode === null,
    );
  }

  /**
   * Waits for `cluster_state:ok` everywhere and for every replica's link to its master: a replica that has
   * not synced yet would never be promoted (its data counts as too old), so a failover right after start
   * would hang.
   */
  private async waitUntilHealthy(): Promise<void> {
    const deadline = Date.now() + 30_000;
    while (!(await this.healthyWithout()) || !(await this.replicasInSync())) {
      if (Date.now() > deadline)
        throw new Error(
          'the Redis Cluster did not reach cluster_state:ok with every replica in sync within 30 s',
        );
      await sleep(100);
    }
  }

  private async replicasInSync(): Promise<boolean> {
    try {
      const replicas = (await this.nodes()).filter((node) => node.role === 'replica');
      const infos = await Promise.all(
        replicas.map((node) => cli(this.access, node.port, 'info', 'replication')),
      );
      return infos.every((info) => info.includes('master_link_status:up'));
    } catch {
      return false;
    }
  }

  /** Every running node (but `excluded`) says the cluster is ok and agrees on the node table. */
  private async healthyWithout(excluded?: number): Promise<boolean> {
    const live = this.running().filter((server) => server.port !== excluded);
    try {
      const states = await Promise.all(
        live.map((server) => cli(this.access, server.port, 'cluster', 'info')),
      );
      return states.every((state) => state.includes('cluster_state:ok'));
    } catch {
      return false;
    }
  }
}

async function startServer(
  dir: string,
  access: CliAccess,
  security: Security | undefined,
): Promise<ServerProcess> {
  const port = await freePort();
  const busPort = await freePort();
  const file = join(dir, `redis-${port}.conf`);
  // A TLS node has no plain port: its one client port is the TLS one, the port the cluster announces.
  const ports = security?.tls ? ['port 0', `tls-port ${port}`] : [`port ${port}`];
  const settings = [...ports, ...baseSettings(dir, port, busPort), ...securitySettings(security)];
  writeFileSync(file, `${settings.join('\n')}\n`, { mode: 0o600 });
  const child = spawn('redis-server', [file], { stdio: 'ignore' });
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server on port ${port} exited while starting`);
    if (
      await cli(access, port, 'ping').then(
        (answer) => answer.includes('PONG'),
        () => false,
      )
    )
      break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`redis-server on port ${port} did not answer within 10 s`);
    }
    await sleep(25);
  }
  return { port, child };
}

/** A cluster node's redis.conf lines: its bus port, its cluster config file, no persistence. */
function baseSettings(dir: string, port: number, busPort: number): string[] {
  return [
    'bind 127.0.0.1',
    'cluster-enabled yes',
    `cluster-port ${busPort}`,
    `cluster-config-file ${join(dir, `nodes-${port}.conf`)}`,
    `cluster-node-timeout ${NODE_TIMEOUT_MS}`,
    `dir ${dir}`,
    'save ""',
    'appendonly no',
  ];
}

/**
 * A secured node's redis.conf lines: TLS (the bus and replication over TLS too; clients need no certificate
 * of their own), the users
 * with `default` off, and the replicas' credentials for their master. The cluster bus has no ACL (it is
 * its own protocol): only TLS protects it.
 */
function securitySettings(security: Security | undefined): string[] {
  if (!security) return [];
  const lines = [
    'user default off',
    `user ${ADMIN_USER} on >${security.adminPassword} ~* &* +@all`,
    ...security.users,
    `masteruser ${ADMIN_USER}`,
    `masterauth ${security.adminPassword}`,
  ];
  const tls = security.tls;
  if (tls)
    lines.push(
      'tls-cluster yes',
      'tls-replication yes',
      `tls-cert-file ${tls.certFile}`,
      `tls-key-file ${tls.keyFile}`,
      `tls-ca-cert-file ${tls.caFile}`,
      'tls-auth-clients no',
    );
  return lines;
}

/** SIGKILLs `child` (unless it has ended) and resolves once it has exited. */
async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

/** redis-cli's access to a cluster's nodes: as its administrator (password in REDISCLI_AUTH), over TLS. */
function cliAccess(security: Security | undefined): CliAccess {
  if (!security) return { args: [], env: undefined };
  const tls = security.tls ? ['--tls', '--cacert', security.tls.caFile] : [];
  return {
    args: ['--user', ADMIN_USER, ...tls],
    env: { ...process.env, REDISCLI_AUTH: security.adminPassword },
  };
}

async function cliRun(access: CliAccess, args: string[], timeout?: number): Promise<string> {
  const { stdout } = await run('redis-cli', [...access.args, ...args], {
    ...(timeout === undefined ? {} : { timeout }),
    ...(access.env ? { env: access.env } : {}),
  });
  return stdout;
}

function cli(access: CliAccess, port: number, ...args: string[]): Promise<string> {
  return cliRun(access, ['-h', '127.0.0.1', '-p', String(port), ...args], 5000);
}

/** CLUSTER NODES lines: `<id> <ip:port@bus> <flags> <master id|-> …`. */
function parseClusterNodes(text: string): ClusterNodeInfo[] {
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const [id, address, flags, masterId, , , , , ...ranges] = line.split(' ');
      const list = flags!.split(',');
      // Ranges are "from-to" or one slot; "[slot->-node]" entries (a migration) are not ownership.
      const slots = ranges
        .filter((range) => /^\d+(-\d+)?$/.test(range))
        .map((range) => range.split('-').map(Number))
        .map(([from, to]) => [from!, to ?? from!] as [number, number]);
      return {
        id: id!,
        port: Number(address!.split('@')[0]!.split(':').pop()),
        role: list.includes('master') ? 'master' : 'replica',
        ...(masterId && masterId !== '-' ? { masterId } : {}),
        failed: list.includes('fail') || list.includes('fail?'),
        slots,
      };
    });
}
