/**
 * The processes a benchmark starts (brokers, baseline servers, redis-server, client workers), all on
 * loopback, and the guarantee that they end with it: every child is registered here and SIGKILLed by
 * `killAll` (run.ts calls it in `finally` and on exit). tests/helpers has similar helpers, but tests/ is not
 * part of the build, and bench must run from dist/ alone.
 */

import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { runMigrations } from '../../broker/db/migrate.js';
import { packageRoot } from '../../broker/paths.js';
import { freePort } from '../../cli/ports.js';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues, type FlagKey } from '../../flags/registry.js';

export const WORKBENCH = join(packageRoot(), 'dist', 'cli', 'main.js');
export const BENCH_ADMIN_TOKEN = `bench-${randomBytes(12).toString('hex')}`;
/** The bench cluster's BUS_SECRET: random per run, in each broker's environment. */
const BENCH_BUS_SECRET = randomBytes(32).toString('hex');
const SERVER = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

const children = new Set<ChildProcess>();
const cleanups: Array<() => void | Promise<void>> = [];

export interface Child {
  process: ChildProcess;
  pid: number;
  output(): string;
  exited: Promise<number | string | null>;
  kill(signal?: NodeJS.Signals): Promise<number | string | null>;
}

export function startChild(command: string, args: string[], env: Record<string, string> = {}): Child {
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk).slice(-20_000); // the tail is enough to explain a failure
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const exited = new Promise<number | string | null>((resolve) =>
    child.on('exit', (code, signal) => {
      children.delete(child);
      resolve(code ?? signal);
    }),
  );
  return {
    process: child,
    pid: child.pid!,
    output: () => output,
    exited,
    kill(signal = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** SIGKILLs every child still running and runs the registered cleanups (databases, temp folders). */
export async function killAll(): Promise<void> {
  const waits = [...children].map((child) => new Promise((resolve) => child.once('exit', resolve)));
  for (const child of children) child.kill('SIGKILL');
  await Promise.all(waits);
  for (const cleanup of cleanups.splice(0).reverse()) await Promise.resolve(cleanup()).catch(() => {});
}
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

export { freePort };

export async function waitUntil(
  what: string,
  condition: () => Promise<boolean> | boolean,
  timeoutMs = 20_000,
) {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const answers = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = createConnection(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.end();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

/** A redis-server of the benchmark's own (no persistence), so nobody else's traffic shares it. */
export async function startRedis(): Promise<{ url: string; child: Child }> {
  const port = await freePort();
  const child = startChild('redis-server', [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
  ]);
  await waitUntil('redis-server', () => answers(port));
  return { url: `redis://127.0.0.1:${port}`, child };
}

/** A fresh, migrated database on the machine's Postgres, dropped by killAll. */
export async function createDatabase(label: string): Promise<string> {
  const name = `wb_bench_${label}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: SERVER });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(SERVER);
  url.pathname = `/${name}`;
  cleanups.push(async () => {
    const client = new pg.Client({ connectionString: SERVER });
    await client.connect();
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await client.end();
  });
  await runMigrations(url.toString());
  return url.toString();
}

/** A flags folder with one environment whose listed flags are on (and those of `shadow` at "shadow"). */
export function flagsFolder(on: FlagKey[], shadow: FlagKey[] = []): { dir: string; env: string } {
  const dir = mkdtempSync(join(tmpdir(), 'wb-bench-flags-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const values = defaultFlagValues();
  for (const key of on) values[key] = true;
  writeFileSync(join(dir, 'bench.json'), renderFlagsDocument(values, shadow));
  return { dir, env: 'bench' };
}

export interface Broker extends Child {
  id: string;
  url: string;
  wsUrl: string;
}

/** Limits raised out of the way: the benchmarks measure throughput, not the quotas. */
export const UNLIMITED = {
  SEND_RATE_PER_MIN: '1000000',
  SEND_BURST: '1000000',
  MESH_CONNECTION_CAP: '1000000',
  FRAME_RATE_PER_SEC: '10000000',
  FRAME_BURST: '10000000',
  HELLO_PENDING_PER_ADDRESS: '1000000',
  LOG_LEVEL: 'warn',
};

/** `workbench broker` (compiled) on a free port, ready once /health answers 200. */
export async function startBroker(id: string, env: Record<string, string>): Promise<Broker> {
  const port = await freePort();
  const child = startChild(process.execPath, [WORKBENCH, 'broker'], {
    ...UNLIMITED,
    ADMIN_TOKEN: BENCH_ADMIN_TOKEN,
    BUS_SECRET: BENCH_BUS_SECRET,
    HOST: '127.0.0.1',
    PORT: String(port),
    NODE_ID: id,
    ...env,
  });
  const url = `http://127.0.0.1:${port}`;
  await waitUntil(`broker ${id} healthy`, async () => {
    if (child.process.exitCode !== null) throw new Error(`broker ${id} exited:\n${child.output()}`);
    return fetch(`${url}/health`).then(
      (r) => r.status === 200,
      () => false,
    );
  });
  return { ...child, id, url, wsUrl: `ws://127.0.0.1:${port}/ws` };
}

/** Resident set size of a process, in bytes (Linux /proc). */
export async function rssOf(pid: number): Promise<number> {
  const { readFileSync } = await import('node:fs');
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) * 1024 : 0;
}
