/**
 * Patroni, the HA engine of phase 4's two-region simulation (docs/multi-region.md § Failover with Patroni):
 * one throw-away etcd (the distributed configuration store that holds the leader key) and one Patroni per
 * region, each running that region's Postgres. Patroni elects the primary (whoever holds the leader key),
 * demotes a primary that cannot renew its key (cut off from etcd), promotes a replica once the key expires
 * (the primary's node crashed), and brings an old primary back as a replica (pg_rewind).
 *
 * The workbench writes each Patroni's configuration (JSON, which YAML reads as it is) and starts it as the
 * `postgres` user (Postgres refuses root) with its folder owned by that user. Every process and folder is
 * registered with cli/cluster/exit-cleanup.ts from its first moment, as every other throw-away server.
 *
 * What it guarantees: `PatroniMember.start` resolves once its REST API answers and Postgres runs in the
 * role asked (`leader` or `replica`); `kill()` is a crash of the member's machine (Patroni and its Postgres
 * SIGKILLed: no demotion, no clean shutdown, the leader key left to expire); `restart()` starts Patroni
 * again on the same data folder. What it does not do: passwords or TLS (loopback only, trust), more than one
 * etcd member (the simulated witness site is a single server), archiving.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onExit } from './exit-cleanup.js';

export const POSTGRES_BIN_DIR = '/usr/lib/postgresql/15/bin';
export const REPLICATION_ROLE = 'replicator';

/** Short timings, so a failover takes seconds (Patroni's rule: loop_wait + 2 × retry_timeout ≤ ttl). */
export const PATRONI_TIMINGS = { ttl: 10, loop_wait: 2, retry_timeout: 4 } as const;

/** How far (bytes of WAL) a replica may lag and still serve reads (HAProxy's `/replica?lag=`). */
export const READ_LAG_BYTES = 1024 * 1024;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function killQuietly(pid: number | undefined, signal: NodeJS.Signals = 'SIGKILL'): void {
  if (!pid) return;
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

/** Polls `check` until it returns a value other than undefined; rejects with `what` after `timeoutMs`. */
async function until<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms`);
    await sleep(100);
  }
}

/** A throw-away single-member etcd on loopback ports, its data in `dataDir`. */
export class ThrowawayEtcd {
  private constructor(
    readonly port: number,
    private readonly child: ChildProcess,
    readonly dataDir: string,
    private readonly unregister: () => void,
  ) {}

  get pid(): number {
    return this.child.pid ?? 0;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  static async start(options: {
    dataDir: string;
    clientPort: number;
    peerPort: number;
    /** An open file descriptor for its output (closed here once the child has its copy). */
    log: number;
  }): Promise<ThrowawayEtcd> {
    const { dataDir, clientPort, peerPort } = options;
    rmSync(dataDir, { recursive: true, force: true });
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    const { log } = options;
    const client = `http://127.0.0.1:${clientPort}`;
    const peer = `http://127.0.0.1:${peerPort}`;
    const child = spawn(
      'etcd',
      [
        '--name=witness',
        `--data-dir=${dataDir}`,
        `--listen-client-urls=${client}`,
        `--advertise-client-urls=${client}`,
        `--listen-peer-urls=${peer}`,
        `--initial-advertise-peer-urls=${peer}`,
        `--initial-cluster=witness=${peer}`,
        '--log-level=warn',
      ],
      { detached: true, stdio: ['ignore', log, log] },
    );
    closeSync(log);
    child.unref();
    const unregister = onExit(() => {
      killQuietly(child.pid);
      rmSync(dataDir, { recursive: true, force: true });
    });
    const etcd = new ThrowawayEtcd(clientPort, child, dataDir, unregister);
    try {
      await until(`etcd on port ${clientPort} did not answer /health`, 20_000, async () => {
        if (child.exitCode !== null) throw new Error(`etcd exited with ${child.exitCode}`);
        const response = await fetch(`${client}/health`, { signal: AbortSignal.timeout(1000) });
        return response.ok ? true : undefined;
      });
    } catch (error) {
      etcd.destroy();
      throw error;
    }
    return etcd;
  }

  destroy(): void {
    this.unregister();
    killQuietly(this.child.pid);
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

export interface PatroniMemberOptions {
  /** The Patroni cluster's name (its etcd key prefix). */
  scope: string;
  /** The member's name: its region. */
  name: string;
  pgPort: number;
  restPort: number;
  /** Where this member reaches etcd (through its link in the simulation). */
  etcdAddress: string;
  /** Where the other members reach this one's Postgres and REST API (through their links). */
  pgConnectAddress: string;
  restConnectAddress: string;
  /** Patroni's synchronous mode: a commit waits for the synchronous standby (zero acknowledged loss). */
  synchronous: boolean;
}

/** Patroni's configuration for one member (docs/multi-region.md § Failover with Patroni). */
export function patroniConfig(options: PatroniMemberOptions, dir: string): Record<string, unknown> {
  const loopback = [
    'local all all trust',
    'host all all 127.0.0.1/32 trust',
    `host replication ${REPLICATION_ROLE} 127.0.0.1/32 trust`,
  ];
  return {
    scope: options.scope,
    name: options.name,
    log: { level: 'INFO' },
    restapi: { listen: `127.0.0.1:${options.restPort}`, connect_address: options.restConnectAddress },
    // use_proxies: the one address given, never the members etcd advertises (those bypass the link).
    etcd3: { hosts: [options.etcdAddress], use_proxies: true },
    bootstrap: {
      dcs: {
        ...PATRONI_TIMINGS,
        maximum_lag_on_failover: 1024 * 1024,
        synchronous_mode: options.synchronous,
        postgresql: {
          use_pg_rewind: true,
          use_slots: true,
          parameters: {
            wal_log_hints: 'on', // pg_rewind needs it (or data checksums) to bring an old primary back
            max_wal_senders: 10,
            max_replication_slots: 10,
            wal_keep_size: '128MB',
            hot_standby: 'on',
            wal_receiver_status_interval: '1s',
            fsync: 'off', // throw-away: a crash is simulated by SIGKILL, the machine itself stays up
          },
        },
      },
      initdb: [{ encoding: 'UTF8' }, { auth: 'trust' }],
      pg_hba: loopback,
    },
    postgresql: {
      listen: `127.0.0.1:${options.pgPort}`,
      connect_address: options.pgConnectAddress,
      data_dir: join(dir, 'data'),
      bin_dir: POSTGRES_BIN_DIR,
      pgpass: join(dir, 'pgpass'),
      pg_hba: loopback,
      authentication: {
        superuser: { username: 'postgres' },
        replication: { username: REPLICATION_ROLE },
        rewind: { username: 'postgres' },
      },
      parameters: { unix_socket_directories: dir },
    },
  };
}

/** Patroni's own view of one member (GET /patroni). */
export interface PatroniView {
  state: string;
  role: 'master' | 'primary' | 'replica' | string;
  timeline?: number;
  replication?: Array<{ application_name: string; state: string; sync_state: string }>;
}

/** GET a path of a Patroni REST API: its status code and JSON body (undefined when it does not answer). */
export async function patroniGet(restAddress: string, path: string, timeoutMs = 1000) {
  const response = await fetch(`http://${restAddress}${path}`, { signal: AbortSignal.timeout(timeoutMs) });
  const body = (await response.json().catch(() => undefined)) as PatroniView | undefined;
  return { status: response.status, body };
}

function postgresIds(): { uid: number; gid: number } {
  return {
    uid: Number(execFileSync('id', ['-u', 'postgres']).toString().trim()),
    gid: Number(execFileSync('id', ['-g', 'postgres']).toString().trim()),
  };
}

/** The postmaster's pid from its data folder (0 when it does not run). */
function postmasterPid(dataDir: string): number {
  const file = join(dataDir, 'postmaster.pid');
  if (!existsSync(file)) return 0;
  const pid = Number(readFileSync(file, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return 0;
  // A crash leaves the file behind: its pid may have been reused since by anything else.
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('postgres') ? pid : 0;
  } catch {
    return 0;
  }
}

/** `pid` and every process whose parent it is (a postmaster's backends), read from /proc. */
function withChildren(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) children.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return [pid, ...children];
}

/**
 * SIGKILLs a member's Patroni and its Postgres (the postmaster and its backends: Patroni starts the
 * postmaster in a session of its own, so killing Patroni alone leaves Postgres running). Synchronous, for
 * the exit cleanups too.
 */
export function killMember(patroniPid: number, dataDir: string): void {
  // Its process group too (it is started detached, so it leads one): an initdb or pg_basebackup it runs.
  if (patroniPid > 0) killQuietly(-patroniPid);
  killQuietly(patroniPid);
  const postmaster = postmasterPid(dataDir);
  if (postmaster > 0) for (const pid of withChildren(postmaster)) killQuietly(pid);
}

/** One region's Patroni and the Postgres it runs, in a folder of its own (/tmp/wb-pg-…, postgres-owned). */
export class PatroniMember {
  private child: ChildProcess | undefined;
  private readonly unregister: () => void;

  private constructor(
    readonly options: PatroniMemberOptions,
    readonly dir: string,
  ) {
    this.unregister = onExit(() => this.destroyNow());
  }

  get dataDir(): string {
    return join(this.dir, 'data');
  }

  get pid(): number {
    return this.child?.pid ?? 0;
  }

  /** This member's REST API as its own region reaches it. */
  get restAddress(): string {
    return `127.0.0.1:${this.options.restPort}`;
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.options.pgPort}/postgres`;
  }

  urlOf(database: string): string {
    return `postgres://postgres@127.0.0.1:${this.options.pgPort}/${database}`;
  }

  /** Writes the configuration, starts Patroni and resolves once Postgres runs as `role`. */
  static async start(options: PatroniMemberOptions, role: 'leader' | 'replica'): Promise<PatroniMember> {
    const dir = mkdtempSync(join(tmpdir(), 'wb-pg-'));
    const member = new PatroniMember(options, dir);
    try {
      const { uid, gid } = postgresIds();
      chownSync(dir, uid, gid);
      const config = join(dir, 'patroni.yml');
      writeFileSync(config, `${JSON.stringify(patroniConfig(options, dir), null, 2)}\n`, { mode: 0o600 });
      chownSync(config, uid, gid);
      member.spawn();
      await member.running(role, 120_000);
      return member;
    } catch (error) {
      member.destroy();
      throw error;
    }
  }

  private spawn(): void {
    const { uid, gid } = postgresIds();
    const log = openSync(join(this.dir, 'patroni.log'), 'a', 0o600);
    chownSync(join(this.dir, 'patroni.log'), uid, gid);
    this.child = spawn('patroni', [join(this.dir, 'patroni.yml')], {
      cwd: this.dir,
      uid,
      gid,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: this.dir, LANG: 'C.UTF-8' },
      detached: true,
      stdio: ['ignore', log, log],
    });
    closeSync(log);
    this.child.unref();
  }

  /** Resolves once Patroni says Postgres runs as `role` here (its /primary or /replica answers 200). */
  async running(role: 'leader' | 'replica', timeoutMs: number): Promise<void> {
    const path = role === 'leader' ? '/primary' : '/replica';
    await until(`Patroni ${this.options.name} did not run Postgres as ${role}`, timeoutMs, async () => {
      if (this.child && this.child.exitCode !== null)
        throw new Error(`Patroni ${this.options.name} exited (${this.child.exitCode}): ${this.logTail()}`);
      return (await patroniGet(this.restAddress, path)).status === 200 ? true : undefined;
    }).catch((error: Error) => {
      throw new Error(`${error.message}; its log ends with:\n${this.logTail()}`);
    });
  }

  /** Patroni's own view of this member, or undefined when its REST API does not answer. */
  async view(): Promise<PatroniView | undefined> {
    return (await patroniGet(this.restAddress, '/patroni').catch(() => undefined))?.body;
  }

  logTail(lines = 15): string {
    try {
      return readFileSync(join(this.dir, 'patroni.log'), 'utf8')
        .trimEnd()
        .split('\n')
        .slice(-lines)
        .join('\n');
    } catch {
      return '(no log)';
    }
  }

  /** The member's machine crashes: Patroni and Postgres SIGKILLed, the leader key left to expire. */
  kill(): void {
    killMember(this.pid, this.dataDir);
    this.child = undefined;
  }

  get stopped(): boolean {
    return this.child === undefined;
  }

  /** Starts Patroni again on its folder: an old primary rejoins as a replica (pg_rewind if it must). */
  async restart(timeoutMs = 120_000): Promise<void> {
    if (!this.stopped) throw new Error(`Patroni ${this.options.name} is running`);
    this.spawn();
    await this.running('replica', timeoutMs);
  }

  private destroyNow(): void {
    killMember(this.pid, this.dataDir);
    rmSync(this.dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
  }

  /** Kills it and removes its folder. Idempotent. */
  destroy(): void {
    this.unregister();
    this.destroyNow();
    this.child = undefined;
  }
}

/**
 * Asks Patroni for a switchover to `candidate` (POST /switchover on the leader's REST API, which demotes
 * the leader cleanly and promotes the candidate) when the leader runs, else a failover (POST /failover,
 * accepted by any member); resolves once the candidate runs as the primary.
 */
export async function switchOver(
  leader: PatroniMember | undefined,
  candidate: PatroniMember,
  timeoutMs = 60_000,
): Promise<void> {
  const via = leader && !leader.stopped ? leader : candidate;
  const path = via === leader ? '/switchover' : '/failover';
  const body =
    via === leader
      ? { leader: leader.options.name, candidate: candidate.options.name }
      : { candidate: candidate.options.name };
  const response = await fetch(`http://${via.restAddress}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  if (response.status !== 200 && response.status !== 202)
    throw new Error(
      `Patroni refused the ${path.slice(1)} to ${candidate.options.name}: ${response.status} ${text.trim()}`,
    );
  await candidate.running('leader', timeoutMs);
}
