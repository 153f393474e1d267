/**
 * A local cluster for a phase, run natively: K broker processes (compiled JS), the machine's Postgres and
 * Redis (a database and a key prefix of its own), and HAProxy configured from the phase's Traefik file. Its
 * state lives in `.workbench/` of the working directory: cluster.json, logs, the flags of the running
 * environment (a copy of the phase preset, so flips never edit the repository's files).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { ensureDatabase, runMigrations } from '../../broker/db/migrate.js';
import { packageRoot } from '../../broker/paths.js';
import { haproxyConfig } from './haproxy.js';
import { readTraefik, type TraefikConfig } from './traefik.js';

export interface ClusterFile {
  /** The phase whose flags the cluster started with (promotions move it on; see `workbench status`). */
  phase: number;
  /** The phase whose topology (Traefik file, node count) the cluster runs. */
  topology: number;
  lb: { url: string; pid: number };
  nodes: Array<{ id: string; url: string; pid: number }>;
  databaseUrl: string;
  redisUrl: string;
  redisKeyPrefix: string;
  adminToken: string;
  flagsEnv: string;
  flagsDir: string;
}

export const stateDir = (cwd = process.cwd()) => join(cwd, '.workbench');
export const clusterFilePath = (cwd = process.cwd()) => join(stateDir(cwd), 'cluster.json');

export function readCluster(cwd = process.cwd()): ClusterFile | undefined {
  const path = clusterFilePath(cwd);
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as ClusterFile) : undefined;
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function freePort(preferred?: number): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(freePort()));
    server.listen(preferred ?? 0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

async function waitHealthy(url: string, timeoutMs: number, isDead: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (isDead()) throw new Error(`${url} exited while starting`);
    const ok = await fetch(`${url}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${url} did not become healthy within ${timeoutMs} ms`);
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
  redisUrl: string;
  cwd?: string;
  log?: (line: string) => void;
  /** The flags environment of the cluster (default `phase<N>`), and whose preset it starts with. */
  environment?: string;
  flagsPhase?: number;
  /** Extra environment for the brokers (tests shorten timings with it). */
  env?: Record<string, string>;
}

export async function up(options: UpOptions): Promise<ClusterFile> {
  const cwd = options.cwd ?? process.cwd();
  const say = options.log ?? (() => {});
  const existing = readCluster(cwd);
  if (existing && [existing.lb.pid, ...existing.nodes.map((n) => n.pid)].some(alive)) {
    throw new Error(
      `a cluster is already running here (phase ${existing.phase}, ${existing.lb.url}); run "workbench down" first`,
    );
  }
  if (spawnSync('haproxy', ['-v']).error) {
    throw new Error(
      'HAProxy is not installed: apt-get update && apt-get install -y --no-install-recommends haproxy',
    );
  }
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
  const dir = stateDir(cwd);
  mkdirSync(join(dir, 'logs'), { recursive: true });
  mkdirSync(join(dir, 'flags'), { recursive: true });
  const flagsEnv = options.environment ?? `phase${options.phase}`;
  const presetPhase = options.flagsPhase ?? options.phase;
  copyFileSync(
    join(packageRoot(), 'phases', `phase${presetPhase}`, 'flags', `phase${presetPhase}.json`),
    join(dir, 'flags', `${flagsEnv}.json`),
  );

  say(`migrating ${new URL(options.databaseUrl).pathname.slice(1)}`);
  await ensureDatabase(options.databaseUrl);
  await runMigrations(options.databaseUrl);

  const adminToken = randomBytes(24).toString('hex');
  const redisKeyPrefix = `wb:${randomBytes(4).toString('hex')}:`;
  const nodes: ClusterFile['nodes'] = [];
  // Everything started here, brokers and load balancer, so a failed start leaves nothing running.
  const children: ChildProcess[] = [];
  try {
    for (let i = 1; i <= count; i++) {
      const id = `broker-${i}`;
      const port = await freePort();
      const logFd = openSync(join(dir, 'logs', `${id}.log`), 'a');
      const child = spawn(process.execPath, [join(packageRoot(), 'dist', 'cli', 'main.js'), 'broker'], {
        cwd,
        env: {
          ...process.env,
          NODE_ID: id,
          PORT: String(port),
          DATABASE_URL: options.databaseUrl,
          REDIS_URL: options.redisUrl,
          REDIS_KEY_PREFIX: redisKeyPrefix,
          ADMIN_TOKEN: adminToken,
          FLAGS_ENV: flagsEnv,
          FLAGS_DIR: join(dir, 'flags'),
          STATE_DIR: dir,
          ...options.env,
        },
        detached: true,
        stdio: ['ignore', logFd, logFd],
      });
      child.unref();
      children.push(child);
      nodes.push({ id, url: `http://127.0.0.1:${port}`, pid: child.pid! });
    }
    await Promise.all(
      nodes.map((node, i) => waitHealthy(node.url, 30_000, () => children[i]!.exitCode !== null)),
    );
    say(`${nodes.length} broker node${nodes.length === 1 ? '' : 's'} healthy`);

    const lbPort = await freePort(options.port ?? 8080);
    const addresses = Object.fromEntries(nodes.map((node) => [node.id, node.url.replace('http://', '')]));
    const cfg = join(dir, 'haproxy.cfg');
    writeFileSync(cfg, haproxyConfig(traefik, { bind: `127.0.0.1:${lbPort}`, addresses }));
    const check = spawnSync('haproxy', ['-c', '-q', '-f', cfg], { encoding: 'utf8' });
    if (check.status !== 0) throw new Error(`generated HAProxy configuration is invalid:\n${check.stderr}`);
    const lbLog = openSync(join(dir, 'logs', 'haproxy.log'), 'a');
    const lb = spawn('haproxy', ['-db', '-f', cfg], { cwd, detached: true, stdio: ['ignore', lbLog, lbLog] });
    lb.unref();
    children.push(lb);
    const lbUrl = `http://127.0.0.1:${lbPort}`;
    await waitHealthy(lbUrl, 15_000, () => lb.exitCode !== null);

    const cluster: ClusterFile = {
      phase: presetPhase,
      topology: options.phase,
      lb: { url: lbUrl, pid: lb.pid! },
      nodes,
      databaseUrl: options.databaseUrl,
      redisUrl: options.redisUrl,
      redisKeyPrefix,
      adminToken,
      flagsEnv,
      flagsDir: join(dir, 'flags'),
    };
    writeFileSync(clusterFilePath(cwd), `${JSON.stringify(cluster, null, 2)}\n`, { mode: 0o600 });
    return cluster;
  } catch (error) {
    for (const child of children) if (child.pid && alive(child.pid)) process.kill(child.pid, 'SIGKILL');
    throw error;
  }
}

/** Stops what `up` started: brokers drain (SIGTERM, then SIGKILL after 12 s), then HAProxy. */
export async function down(cwd = process.cwd()): Promise<ClusterFile | undefined> {
  const cluster = readCluster(cwd);
  if (!cluster) return undefined;
  const stop = async (pid: number, graceMs: number) => {
    if (!alive(pid)) return;
    process.kill(pid, 'SIGTERM');
    const deadline = Date.now() + graceMs;
    while (alive(pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    if (alive(pid)) process.kill(pid, 'SIGKILL');
  };
  await Promise.all(cluster.nodes.map((node) => stop(node.pid, 12_000)));
  await stop(cluster.lb.pid, 5000);
  rmSync(clusterFilePath(cwd), { force: true });
  return cluster;
}
