/**
 * A throw-away Redis Cluster for the tests and the fan-out benchmark (docs/redis-cluster.md): three masters,
 * each with one replica, of `redis-server` processes on free loopback ports, in a temporary folder (cluster
 * config files only, no persistence), joined with `redis-cli --cluster create`. `stop()` kills every process
 * and removes the folder. A short `cluster-node-timeout` lets a killed master's replica take over within
 * seconds (`killMasterOf`).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Cluster } from 'ioredis';
import { freePort } from '../ports.js';

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

export class ThrowawayRedisCluster {
  private constructor(
    private readonly dir: string,
    private readonly servers: ServerProcess[],
  ) {}

  /** Starts 3 masters + 3 replicas and waits until every node reports `cluster_state:ok`. */
  static async start(
    options: { masters?: number; replicasPerMaster?: number } = {},
  ): Promise<ThrowawayRedisCluster> {
    const masters = options.masters ?? 3;
    const replicas = options.replicasPerMaster ?? 1;
    const dir = mkdtempSync(join(tmpdir(), 'wb-redis-cluster-'));
    const cluster = new ThrowawayRedisCluster(dir, []);
    try {
      for (let i = 0; i < masters * (1 + replicas); i++) cluster.servers.push(await startServer(dir));
      const addresses = cluster.servers.map((server) => `127.0.0.1:${server.port}`);
      await run('redis-cli', [
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
        return parseClusterNodes(await cli(server.port, 'cluster', 'nodes'));
      } catch {
        // that node does not answer: ask the next one
      }
    }
    throw new Error('no node of the Redis Cluster answers');
  }

  /** A cluster client (tests' own checks); disconnect it after use. */
  client(): Cluster {
    const client = new Cluster(this.seedNodes, { clusterRetryStrategy: () => 200 });
    client.on('error', () => {});
    return client;
  }

  /** One command on the node at `port` (redis-cli --raw), its answer's lines. */
  async command(port: number, ...args: string[]): Promise<string[]> {
    return (await cli(port, '--raw', ...args)).split('\n').filter(Boolean);
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
        this.running().map((server) => cli(server.port, 'cluster', 'info').catch(() => '')),
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
      const infos = await Promise.all(replicas.map((node) => cli(node.port, 'info', 'replication')));
      return infos.every((info) => info.includes('master_link_status:up'));
    } catch {
      return false;
    }
  }

  /** Every running node (but `excluded`) says the cluster is ok and agrees on the node table. */
  private async healthyWithout(excluded?: number): Promise<boolean> {
    const live = this.running().filter((server) => server.port !== excluded);
    try {
      const states = await Promise.all(live.map((server) => cli(server.port, 'cluster', 'info')));
      return states.every((state) => state.includes('cluster_state:ok'));
    } catch {
      return false;
    }
  }
}

async function startServer(dir: string): Promise<ServerProcess> {
  const port = await freePort();
  const busPort = await freePort();
  const child = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--cluster-enabled',
      'yes',
      '--cluster-port',
      String(busPort),
      '--cluster-config-file',
      join(dir, `nodes-${port}.conf`),
      '--cluster-node-timeout',
      String(NODE_TIMEOUT_MS),
      '--dir',
      dir,
      '--save',
      '',
      '--appendonly',
      'no',
    ],
    { stdio: 'ignore' },
  );
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server on port ${port} exited while starting`);
    if (
      await cli(port, 'ping').then(
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

/** SIGKILLs `child` (unless it has ended) and resolves once it has exited. */
async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], {
    timeout: 5000,
  });
  return stdout;
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
