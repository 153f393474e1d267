/**
 * Throw-away PostgreSQL and Redis servers on free loopback ports: what `workbench chaos` restarts, stalls
 * and kills, and what the tests that stop the database or Redis use (tests/helpers re-export these), so
 * the machine's own servers are never touched.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import {
  appendFileSync,
  chownSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onExit } from '../cluster/exit-cleanup.js';
import { freePort } from '../ports.js';
import { sleep } from './sleep.js';

export { freePort };

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function postgresBinDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  if (!versions[0]) throw new Error(`no PostgreSQL server binaries under ${root}`);
  return join(root, versions[0], 'bin');
}

/** Postgres refuses to run as root: its tools run as the `postgres` user. */
function asPostgres(command: string, args: string[]): void {
  execFileSync('runuser', ['-u', 'postgres', '--', join(postgresBinDir(), command), ...args], {
    stdio: 'pipe',
  });
}

/**
 * The same, without blocking the event loop: for tools that talk to a server through something this
 * process serves (pg_basebackup through a latency proxy), and for anything slow. Rejects with the tool's
 * stderr in the message.
 */
export function runAsPostgres(command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      'runuser',
      ['-u', 'postgres', '--', join(postgresBinDir(), command), ...args],
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${command} failed: ${String(stderr).trim() || error.message}`));
        else resolve(String(stdout));
      },
    );
  });
}

export interface ThrowawayPostgresOptions {
  /**
   * Fills the (empty, postgres-owned) data folder instead of `initdb`: pg_basebackup for a replica
   * (cli/cluster/pg-replica.ts).
   */
  initialize?: (dataDir: string) => Promise<void>;
  /** Server settings appended to postgresql.conf before the first start (quoted; later ones win). */
  settings?: Record<string, string | number>;
  /** Lines appended to pg_hba.conf before the first start. */
  hba?: string[];
  /**
   * `fsync=on` and `synchronous_commit=on` (a commit is on disk before it is acknowledged), for a crash
   * that must lose nothing committed (`workbench chaos`'s `postgres-crash`); default off: tests' speed.
   */
  durable?: boolean;
}

/** A setting as postgresql.conf reads it: a single-quoted string (quotes doubled). */
function confLine(name: string, value: string | number): string {
  if (!/^[a-z_][a-z0-9_.]*$/i.test(name)) throw new Error(`not a PostgreSQL setting name: ${name}`);
  return `${name} = '${String(value).replaceAll("'", "''")}'\n`;
}

/**
 * A throw-away PostgreSQL cluster on a free port. `restart` is a real server restart (every connection
 * dropped); `destroy` stops it and deletes its files, as the process's exit does if nobody did
 * (cli/cluster/exit-cleanup.ts).
 */
export class ThrowawayPostgres {
  private constructor(
    readonly dir: string,
    readonly port: number,
    private readonly unregister: () => void,
    readonly durable = false,
  ) {}

  static async create(options: ThrowawayPostgresOptions = {}): Promise<ThrowawayPostgres> {
    const dir = mkdtempSync(join(tmpdir(), 'wb-pg-'));
    const data = join(dir, 'data');
    // From its folder's first moment: a process interrupted in the middle of initdb or the first start
    // (Ctrl-C to `workbench up --phase 4`) still stops the server and removes the folder on its way out.
    const unregister = onExit(() => stopAndRemove(dir));
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    chownSync(dir, uid, gid);
    try {
      if (options.initialize) await options.initialize(data);
      else asPostgres('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
      const settings = Object.entries(options.settings ?? {}).map(([name, value]) => confLine(name, value));
      if (settings.length > 0) appendFileSync(join(data, 'postgresql.conf'), settings.join(''));
      if (options.hba?.length) appendFileSync(join(data, 'pg_hba.conf'), `${options.hba.join('\n')}\n`);
      const cluster = new ThrowawayPostgres(dir, await freePort(), unregister, options.durable);
      // Not the blocking `start()`: a replica's start may need this process (a proxy it serves) to answer.
      await runAsPostgres('pg_ctl', cluster.pgCtl('-w', 'start'));
      return cluster;
    } catch (error) {
      // A start that failed half-way may have left a server running: stop it before removing its files.
      unregister();
      stopAndRemove(dir);
      throw error;
    }
  }

  get url(): string {
    return this.urlOf('postgres');
  }

  /** The cluster's data folder (PGDATA). */
  get dataDir(): string {
    return join(this.dir, 'data');
  }

  /** The URL of one database of the cluster (`workbench up` creates it if missing). */
  urlOf(database: string): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${database}`;
  }

  private get options(): string {
    const durability = this.durable ? '-c fsync=on -c synchronous_commit=on' : '-c fsync=off';
    return `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 ${durability}`;
  }

  /** pg_ctl's arguments to start or restart this cluster (its data folder, options, log). */
  private pgCtl(...action: string[]): string[] {
    return ['-D', join(this.dir, 'data'), '-o', this.options, '-l', join(this.dir, 'log'), ...action];
  }

  start(): void {
    asPostgres('pg_ctl', this.pgCtl('-w', 'start'));
  }

  /**
   * `pg_ctl restart` (fast: open sessions are cut, as in a real restart); resolves once it accepts again.
   * Asynchronous, so the caller's own clients keep running while the server is down.
   */
  restart(): Promise<void> {
    const args = this.pgCtl('-m', 'fast', '-w', 'restart');
    return new Promise((resolve, reject) => {
      execFile('runuser', ['-u', 'postgres', '--', join(postgresBinDir(), 'pg_ctl'), ...args], (error) =>
        error ? reject(error) : resolve(),
      );
    });
  }

  /**
   * A crash: SIGKILL of the postmaster (its backends, orphaned, exit on their own), then a start, which
   * replays the WAL (crash recovery). Resolves once it accepts connections again. What was committed before
   * the kill must be there after it (with `durable`, even had the machine crashed too).
   */
  async crash(): Promise<void> {
    const pid = this.postmasterPid();
    process.kill(pid, 'SIGKILL');
    const deadline = Date.now() + 10_000;
    while (alive(pid) && Date.now() < deadline) await sleep(20);
    // The old backends hold the shared memory until they notice: the start is retried until they are gone.
    for (let attempt = 1; ; attempt++) {
      try {
        await runAsPostgres('pg_ctl', this.pgCtl('-w', 'start'));
        return;
      } catch (error) {
        if (attempt === 20) throw error;
        await sleep(250);
      }
    }
  }

  /** The postmaster's pid, from the first line of its postmaster.pid. */
  postmasterPid(): number {
    const pid = Number(readFileSync(join(this.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    if (!Number.isInteger(pid) || pid <= 0) throw new Error(`no postmaster pid in ${this.dataDir}`);
    return pid;
  }

  stop(): void {
    asPostgres('pg_ctl', ['-D', join(this.dir, 'data'), '-m', 'immediate', '-w', 'stop']);
  }

  /** Stops it and deletes its files; the process's exit no longer needs to. */
  destroy(): void {
    this.unregister();
    stopAndRemove(this.dir);
  }
}

/**
 * Stops the cluster in `dir` if it runs (immediately: nothing to save) and deletes the folder. Interrupted
 * in the middle of a first start, the server may still be writing its files while they are removed (the
 * removal then fails with ENOTEMPTY): it is stopped again and the removal retried.
 */
function stopAndRemove(dir: string): void {
  for (let attempt = 1; ; attempt++) {
    try {
      asPostgres('pg_ctl', ['-D', join(dir, 'data'), '-m', 'immediate', '-w', 'stop']);
    } catch {
      // not running (or not yet made)
    }
    try {
      rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
      return;
    } catch (error) {
      if (attempt === 3) throw error;
    }
  }
}

export interface ThrowawayRedisOptions {
  /**
   * ACL users, as redis.conf `user` lines (cli/cluster/redis-acl.ts); given, the `default` user is off, so
   * nothing reaches the server without a user and password.
   */
  users?: string[];
  /** TLS only (`--port 0`, the port is a TLS port): the server's certificate, its key, and the CA. */
  tls?: { certFile: string; keyFile: string; caFile: string };
}

/**
 * A throw-away redis-server on a free loopback port, to stop, restart or stall (SIGSTOP/SIGCONT). With
 * users or TLS, its settings go to a configuration file of the owner's only (never the command line, which
 * `ps` shows to every account).
 */
export class ThrowawayRedis {
  private child: ChildProcess | undefined;
  private configDir: string | undefined;

  private constructor(
    readonly port: number,
    private readonly options: ThrowawayRedisOptions,
  ) {}

  static async start(options: ThrowawayRedisOptions = {}): Promise<ThrowawayRedis> {
    const redis = new ThrowawayRedis(await freePort(), options);
    await redis.restart();
    return redis;
  }

  get url(): string {
    return `${this.options.tls ? 'rediss' : 'redis'}://127.0.0.1:${this.port}`;
  }

  /** The URL with `user` and `password` in it. */
  urlAs(user: string, password: string): string {
    const url = new URL(this.url);
    url.username = user;
    url.password = password;
    return url.toString();
  }

  /** The server's arguments: the settings on the command line, or the file holding them. */
  private arguments(): string[] {
    const { users, tls } = this.options;
    if (!users && !tls)
      return ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
    const settings = [
      ...(tls ? ['port 0', `tls-port ${this.port}`] : [`port ${this.port}`]),
      'bind 127.0.0.1',
      'save ""',
      'appendonly no',
    ];
    if (tls)
      settings.push(
        `tls-cert-file ${tls.certFile}`,
        `tls-key-file ${tls.keyFile}`,
        `tls-ca-cert-file ${tls.caFile}`,
        'tls-auth-clients no',
      );
    if (users) settings.push('user default off', ...users);
    this.configDir ??= mkdtempSync(join(tmpdir(), 'wb-redis-'));
    const file = join(this.configDir, 'redis.conf');
    writeFileSync(file, `${settings.join('\n')}\n`, { mode: 0o600 });
    return [file];
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Starts the server (again, after `stop`): empty, as a restarted cache without persistence is. */
  async restart(): Promise<void> {
    const child = spawn('redis-server', this.arguments(), { stdio: 'ignore' });
    this.child = child;
    const deadline = Date.now() + 10_000;
    while (!(await this.answers())) {
      if (child.exitCode !== null) throw new Error(`redis-server on port ${this.port} exited while starting`);
      if (Date.now() > deadline) {
        await this.stop(); // never leave a server behind that nobody will stop
        throw new Error('timed out after 10000 ms waiting for redis-server up');
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }

  /** Stops it and removes its configuration file, if it had one. */
  async destroy(): Promise<void> {
    await this.stop();
    if (this.configDir) rmSync(this.configDir, { recursive: true, force: true });
  }

  /**
   * Kills it at once and removes its configuration file, synchronously: a last-resort cleanup on the
   * process's exit (cli/cluster/exit-cleanup.ts), where nothing can be awaited.
   */
  killNow(): void {
    try {
      if (this.child?.pid) process.kill(this.child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
    if (this.configDir) rmSync(this.configDir, { recursive: true, force: true });
  }

  /** Freezes the server for `ms` (SIGSTOP, then SIGCONT): connections stay open and nothing answers. */
  async stall(ms: number, signal?: AbortSignal): Promise<void> {
    const child = this.child;
    if (!child?.pid) throw new Error('redis-server is not running');
    child.kill('SIGSTOP');
    try {
      await sleep(ms, signal);
    } finally {
      child.kill('SIGCONT');
    }
  }

  /** Leaves the server running after this process exits (`workbench chaos --keep`). */
  detach(): void {
    this.child?.unref();
  }

  private answers(): Promise<boolean> {
    return new Promise((resolve) => {
      const socket = createConnection(this.port, '127.0.0.1');
      socket.once('connect', () => {
        socket.end();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
  }
}
