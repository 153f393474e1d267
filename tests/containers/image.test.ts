/**
 * The broker's image (issue 18, item 1; docs/container-image.md), built and run under a real container
 * engine: this checkout's dockerd (Debian's docker.io), the base image `node:24-bookworm-slim` made locally
 * when missing (debootstrap + the npm registry's Node and npm), then `docker build` of the Dockerfile and a
 * container of it on the default bridge, published on 127.0.0.1 and pointed at the machine's PostgreSQL
 * and Redis through relays on the bridge gateway (they listen on 127.0.0.1 only).
 *
 * `npm run test:containers` (not part of `npm test`: it needs root, apt packages and minutes of building).
 * It removes the containers and images it made and stops the daemon if it started it; KEEP_IMAGES=1 keeps
 * the images (the compose test uses `mesh-broker:latest`). Figures: test-results/containers/report.json.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import {
  BASE_IMAGE,
  bridgeGateway,
  buildImage,
  CONTAINERS_DIR,
  type Daemon,
  docker,
  dockerOk,
  ensureBaseImage,
  IMAGE,
  LOG_DIR,
  missingPrerequisites,
  type Relay,
  ROOT,
  relay,
  run,
  startDaemon,
} from '../helpers/docker.js';
import { freePort } from '../helpers/ports.js';
import { SERVER_URL } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const suffix = randomBytes(4).toString('hex');
const CONTAINER = `mesh-broker-image-test-${suffix}`;
const DATABASE = `wb_test_container_${suffix}`;
const REDIS_PREFIX = `ctest${suffix}:`;
/** `docker stop`'s grace period: past it the engine sends SIGKILL (exit 137). */
const STOP_TIMEOUT_S = 20;

const report: Record<string, unknown> = {};
let daemon: Daemon | undefined;
let baseMadeHere = false;
let imageBuilt = false;
const relays: Relay[] = [];
let port = 0;
/** The broker's settings, for every container of the test: the database and Redis through the relays. */
let brokerEnv: string[] = [];
const containers: string[] = [];

/** A broker container of the image on the default bridge, published on 127.0.0.1:`hostPort`. */
async function runBroker(name: string, hostPort: number, extra: string[] = []): Promise<void> {
  containers.push(name);
  await dockerOk([
    'run',
    '--detach',
    '--name',
    name,
    '--publish',
    `127.0.0.1:${hostPort}:8080`,
    ...brokerEnv.flatMap((pair) => ['--env', pair]),
    ...extra,
    IMAGE,
  ]);
}

/** Waits for /health 200 on the published port; fails early when the container is no longer running. */
async function healthy(
  name: string,
  hostPort: number,
): Promise<{ status: string; db: string; redis: string }> {
  return waitFor(
    async () => {
      const response = await fetch(`http://127.0.0.1:${hostPort}/health`).catch(() => undefined);
      if (response?.status === 200)
        return (await response.json()) as { status: string; db: string; redis: string };
      const state = await inspect('{{.State.Status}}', name);
      if (state !== 'running')
        throw new Error(`${name} is ${state}: ${(await docker(['logs', name])).stdout}`);
      return undefined;
    },
    { timeoutMs: 60_000, intervalMs: 250, what: `/health 200 from ${name}` },
  );
}

function note(key: string, value: unknown): void {
  report[key] = value;
  console.log(`containers: ${key} = ${typeof value === 'string' ? value : JSON.stringify(value)}`);
}

async function inspect(format: string, target = CONTAINER): Promise<string> {
  return dockerOk(['inspect', '-f', format, target]);
}

beforeAll(async () => {
  const missing = missingPrerequisites();
  if (missing.length > 0) throw new Error(`the container test needs: ${missing.join('; ')}`);
  const started = Date.now();
  daemon = await startDaemon();
  note('dockerd', daemon.startedHere ? `started in ${(Date.now() - started) / 1000} s` : 'already running');
  const base = await ensureBaseImage();
  baseMadeHere = base.made;
  note('baseImage', base.made ? `made in ${base.seconds.toFixed(1)} s` : 'present');
  imageBuilt = true; // a failed build may still leave a tag behind: remove it either way
  const build = await buildImage(IMAGE);
  note('imageBuildSeconds', Number(build.seconds.toFixed(1)));
  const size = Number(await dockerOk(['image', 'inspect', '-f', '{{.Size}}', IMAGE]));
  const baseSize = Number(await dockerOk(['image', 'inspect', '-f', '{{.Size}}', BASE_IMAGE]));
  note('imageSizeMB', Math.round(size / 1e6));
  note('baseImageSizeMB', Math.round(baseSize / 1e6));

  // The machine's PostgreSQL and Redis, reached from the bridge through the gateway.
  const admin = new pg.Client({ connectionString: SERVER_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${DATABASE}`);
  await admin.end();
  const gateway = await bridgeGateway();
  const pgUrl = new URL(SERVER_URL);
  const redisUrl = new URL(REDIS_URL);
  const pgRelay = await relay(gateway, Number(pgUrl.port || 5432), pgUrl.hostname);
  const redisRelay = await relay(gateway, Number(redisUrl.port || 6379), redisUrl.hostname);
  relays.push(pgRelay, redisRelay);
  const databaseUrl = new URL(SERVER_URL);
  databaseUrl.hostname = gateway;
  databaseUrl.port = String(pgRelay.port);
  databaseUrl.pathname = `/${DATABASE}`;

  brokerEnv = [
    `DATABASE_URL=${databaseUrl}`,
    `REDIS_URL=redis://${gateway}:${redisRelay.port}`,
    `REDIS_KEY_PREFIX=${REDIS_PREFIX}`,
    `ADMIN_TOKEN=${randomBytes(16).toString('hex')}`,
    `BUS_SECRET=${randomBytes(32).toString('hex')}`,
  ];
  port = await freePort();
  await runBroker(CONTAINER, port, ['--env', 'NODE_ID=container-test']);
}, 30 * 60_000);

afterAll(async () => {
  try {
    if (daemon) {
      const logs = await docker(['logs', CONTAINER]);
      if (logs.code === 0) {
        mkdirSync(LOG_DIR, { recursive: true });
        writeFileSync(join(LOG_DIR, 'broker-container.log'), `${logs.stdout}${logs.stderr}`);
      }
      for (const name of containers) await docker(['rm', '--force', '--volumes', name]);
      if (process.env.KEEP_IMAGES !== '1') {
        if (imageBuilt) await docker(['image', 'rm', '--force', IMAGE]);
        if (baseMadeHere) await docker(['image', 'rm', '--force', BASE_IMAGE]);
      }
    }
  } finally {
    await Promise.all(relays.map((r) => r.close()));
    const admin = new pg.Client({ connectionString: SERVER_URL });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${DATABASE} WITH (FORCE)`);
    await admin.end();
    const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
    await redis.connect();
    const keys = await redis.keys(`${REDIS_PREFIX}*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
    await daemon?.stop();
    if (daemon?.startedHere) {
      // Nothing of the daemon may be left running: dockerd, its containerd and their shims.
      const left = (await run('pgrep', ['-f', '--', `${CONTAINERS_DIR}/`])).stdout.trim();
      report.leftoverProcesses = left ? left.split('\n') : [];
    }
    mkdirSync(LOG_DIR, { recursive: true });
    writeFileSync(join(LOG_DIR, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
  }
  expect(report.leftoverProcesses ?? []).toEqual([]);
}, 5 * 60_000);

describe('the broker image', () => {
  it('is configured as documented: non-root user, port, volume, health check, entry point', async () => {
    const config = JSON.parse(await dockerOk(['image', 'inspect', '-f', '{{json .Config}}', IMAGE])) as {
      User: string;
      ExposedPorts: Record<string, unknown>;
      Volumes: Record<string, unknown>;
      Healthcheck?: { Test: string[] };
      Entrypoint: string[];
      Cmd: string[];
      Env: string[];
    };
    expect(config.User).toBe('node');
    expect(Object.keys(config.ExposedPorts)).toEqual(['8080/tcp']);
    expect(Object.keys(config.Volumes)).toEqual(['/var/lib/mesh-broker']);
    expect(config.Healthcheck?.Test[0]).toBe('CMD');
    expect(config.Entrypoint).toEqual(['node', '/app/dist/cli/main.js']);
    expect(config.Cmd).toEqual(['broker']);
    expect(config.Env).toEqual(
      expect.arrayContaining([
        'STATE_DIR=/var/lib/mesh-broker',
        'HOST=0.0.0.0',
        'PORT=8080',
        'NODE_ENV=production',
      ]),
    );
    const version = await dockerOk(['run', '--rm', '--entrypoint', 'node', IMAGE, '--version']);
    note('nodeVersion', version);
    expect(version).toMatch(/^v24\./);
  });

  it('holds production dependencies only, and the files a node reads at run time', async () => {
    // Every top-level package of node_modules in the image, from a throw-away container.
    const listing = await dockerOk([
      'run',
      '--rm',
      '--entrypoint',
      'node',
      IMAGE,
      '-e',
      `const fs=require('fs');const out=[];for(const n of fs.readdirSync('/app/node_modules')){if(n.startsWith('.'))continue;
       if(n.startsWith('@'))for(const m of fs.readdirSync('/app/node_modules/'+n))out.push(n+'/'+m);else out.push(n);}
       const files=['dist/cli/main.js','migrations/0000_init.sql','flags/environments/local.json','phases/phase3/expectations.json']
       .filter(f=>!fs.existsSync('/app/'+f));console.log(JSON.stringify({packages:out,missing:files}))`,
    ]);
    const { packages, missing } = JSON.parse(listing) as { packages: string[]; missing: string[] };
    expect(missing).toEqual([]);
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { dev?: boolean; optional?: boolean }>;
    };
    const topLevel = (path: string) => /^node_modules\/(@[^/]+\/)?[^/]+$/.test(path);
    const devOnly = Object.entries(lock.packages)
      .filter(([path, entry]) => topLevel(path) && entry.dev)
      .map(([path]) => path.slice('node_modules/'.length));
    const production = Object.entries(lock.packages)
      .filter(([path, entry]) => topLevel(path) && !entry.dev && !entry.optional)
      .map(([path]) => path.slice('node_modules/'.length));
    expect(packages.filter((name) => devOnly.includes(name))).toEqual([]);
    expect(packages).not.toContain('vitest');
    expect(packages).not.toContain('typescript');
    expect(production.filter((name) => !packages.includes(name))).toEqual([]);
    note('productionPackages', packages.length);
  });

  it('runs as a non-root user with node as PID 1, and serves /health on the published port', async () => {
    const health = await healthy(CONTAINER, port);
    expect(health).toMatchObject({ status: 'ok', db: 'up', redis: 'up' });
    expect(await dockerOk(['exec', CONTAINER, 'id', '-u'])).not.toBe('0');
    expect(await dockerOk(['exec', CONTAINER, 'id', '-un'])).toBe('node');
    const pid1 = await dockerOk(['exec', CONTAINER, 'cat', '/proc/1/cmdline']);
    expect(pid1.split('\0').filter(Boolean)).toEqual(['node', '/app/dist/cli/main.js', 'broker']);
  });

  it("becomes healthy by the image's own HEALTHCHECK", async () => {
    const started = Date.now();
    await waitFor(
      async () => {
        const status = await inspect('{{.State.Health.Status}}');
        if (status === 'unhealthy') throw new Error(`unhealthy: ${await inspect('{{json .State.Health}}')}`);
        return status === 'healthy';
      },
      { timeoutMs: 90_000, intervalMs: 500, what: 'health status healthy' },
    );
    note('healthySeconds', Number(((Date.now() - started) / 1000).toFixed(1)));
  }, 120_000);

  it('has a writable STATE_DIR on a volume, and a read-only application', async () => {
    const mounts = JSON.parse(await inspect('{{json .Mounts}}')) as { Destination: string; Type: string }[];
    expect(mounts).toEqual([
      expect.objectContaining({ Destination: '/var/lib/mesh-broker', Type: 'volume' }),
    ]);
    const write = await docker([
      'exec',
      CONTAINER,
      'sh',
      '-c',
      'echo ok > "$STATE_DIR/probe" && cat "$STATE_DIR/probe"',
    ]);
    expect(write).toMatchObject({ code: 0, stdout: 'ok\n' });
    const app = await docker(['exec', CONTAINER, 'sh', '-c', 'touch /app/dist/probe']);
    expect(app.code).not.toBe(0);
  });

  it('drains on docker stop (SIGTERM to PID 1): peers closed with 1001, exit 0 within the timeout', async () => {
    const socket = new WebSocket(`ws://127.0.0.1:${port}/ws`);
    await new Promise<void>((resolve, reject) => {
      socket.once('open', () => resolve());
      socket.once('error', reject);
    });
    const closed = new Promise<number>((resolve) => socket.once('close', (code) => resolve(code)));
    const started = Date.now();
    await dockerOk(['stop', '--time', String(STOP_TIMEOUT_S), CONTAINER], { timeoutMs: 60_000 });
    const seconds = (Date.now() - started) / 1000;
    note('stopSeconds', Number(seconds.toFixed(1)));
    expect(await closed).toBe(1001);
    expect(await inspect('{{.State.ExitCode}}')).toBe('0');
    expect(seconds).toBeLessThan(STOP_TIMEOUT_S);
    const logs = (await docker(['logs', CONTAINER])).stdout
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { msg: string; reason?: string });
    expect(logs).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ msg: 'shutdown requested', reason: 'SIGTERM' }),
        expect.objectContaining({ msg: 'node stopped' }),
      ]),
    );
  }, 90_000);

  it('runs with a read-only root filesystem (--read-only): only the STATE_DIR volume is written', async () => {
    const name = `${CONTAINER}-ro`;
    const roPort = await freePort();
    await runBroker(name, roPort, ['--read-only', '--env', 'NODE_ID=container-test-ro']);
    expect(await healthy(name, roPort)).toMatchObject({ status: 'ok', db: 'up' });
    await dockerOk(['stop', '--time', String(STOP_TIMEOUT_S), name], { timeoutMs: 60_000 });
    expect(await inspect('{{.State.ExitCode}}', name)).toBe('0');
  }, 90_000);
});
