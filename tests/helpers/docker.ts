/**
 * A real container engine for the container tests (docs/container-image.md): Debian's docker.io, a dockerd
 * of this checkout started by scripts/containers/dockerd.sh (its own data root, exec root, pid file and
 * socket under .workbench/containers/), the base image made by scripts/containers/base-image.sh, and the
 * project's image built from the Dockerfile. Every client call goes to Debian's client at /usr/bin/docker
 * with DOCKER_HOST set to that socket (the `docker` first on PATH here may be another client).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { packageRoot } from '../../broker/paths.js';
import { runToEnd } from './process.js';

export const ROOT = packageRoot();
export const CONTAINERS_DIR = process.env.CONTAINERS_DIR ?? join(ROOT, '.workbench', 'containers');
export const DOCKER_HOST = `unix://${join(CONTAINERS_DIR, 'docker.sock')}`;
export const DOCKER = '/usr/bin/docker';
/** The official name of the base image; made locally when missing. */
export const BASE_IMAGE = 'node:24-bookworm-slim';
/** The project's image, as the compose files name it. */
export const IMAGE = 'mesh-broker:latest';
/** Where the build logs go (gitignored). */
export const LOG_DIR = join(ROOT, 'test-results', 'containers');

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end from the checkout, against this checkout's daemon; the caller judges `code`. */
export async function run(
  command: string,
  args: string[],
  options: { env?: NodeJS.ProcessEnv; timeoutMs?: number; logFile?: string; input?: string } = {},
): Promise<Run> {
  const { code, signal, stdout, stderr } = await runToEnd(command, args, {
    cwd: ROOT,
    env: { ...process.env, DOCKER_HOST, ...options.env },
    input: options.input,
    timeoutMs: options.timeoutMs,
  });
  if (options.logFile) {
    mkdirSync(LOG_DIR, { recursive: true });
    writeFileSync(join(LOG_DIR, options.logFile), `${stdout}${stderr}`);
  }
  return { code: code ?? (signal ? 128 : 1), stdout, stderr };
}

/** `docker ARGS` against this checkout's daemon. */
export function docker(args: string[], options: Parameters<typeof run>[2] = {}): Promise<Run> {
  return run(DOCKER, args, options);
}

/** `docker ARGS`, its trimmed stdout; throws with stderr on a non-zero exit. */
export async function dockerOk(args: string[], options: Parameters<typeof run>[2] = {}): Promise<string> {
  const result = await docker(args, options);
  if (result.code !== 0) {
    throw new Error(`docker ${args.join(' ')} exited ${result.code}: ${result.stderr.trim().slice(-2000)}`);
  }
  return result.stdout.trim();
}

/** What this machine lacks for the container tests, as the command that installs it; none when ready. */
export function missingPrerequisites(): string[] {
  const missing: string[] = [];
  if (!existsSync(DOCKER) || !existsSync('/usr/sbin/dockerd')) missing.push('apt-get install -y docker.io');
  if (!existsSync('/usr/sbin/debootstrap')) missing.push('apt-get install -y debootstrap');
  if (process.getuid?.() !== 0) missing.push('run as root (dockerd, debootstrap)');
  return missing;
}

export interface Daemon {
  /** False when a daemon of this checkout already ran (another test or engineer uses it): left running. */
  startedHere: boolean;
  /** Stops the daemon if this call started it. */
  stop(): Promise<void>;
}

/** Starts this checkout's dockerd unless it runs already. */
export async function startDaemon(): Promise<Daemon> {
  const script = join(ROOT, 'scripts', 'containers', 'dockerd.sh');
  const env = { CONTAINERS_DIR };
  const running = (await run('bash', [script, 'status'], { env })).code === 0;
  if (!running) {
    const started = await run('bash', [script, 'start'], { env, timeoutMs: 90_000 });
    if (started.code !== 0) throw new Error(`dockerd did not start: ${started.stderr.trim()}`);
  }
  return {
    startedHere: !running,
    async stop() {
      if (running) return;
      const stopped = await run('bash', [script, 'stop'], { env, timeoutMs: 60_000 });
      if (stopped.code !== 0) throw new Error(`dockerd did not stop: ${stopped.stderr.trim()}`);
    },
  };
}

export async function imageExists(image: string): Promise<boolean> {
  return (await docker(['image', 'inspect', image])).code === 0;
}

/** Makes the base image unless present (scripts/containers/base-image.sh); its time, and whether it ran. */
export async function ensureBaseImage(): Promise<{ made: boolean; seconds: number }> {
  if (await imageExists(BASE_IMAGE)) return { made: false, seconds: 0 };
  const started = Date.now();
  const result = await run('bash', [join(ROOT, 'scripts', 'containers', 'base-image.sh')], {
    env: { CONTAINERS_DIR },
    timeoutMs: 15 * 60_000,
    logFile: 'base-image.log',
  });
  if (result.code !== 0)
    throw new Error(`base-image.sh exited ${result.code}: ${result.stderr.trim().slice(-2000)}`);
  return { made: true, seconds: (Date.now() - started) / 1000 };
}

/**
 * Certificates this machine added to its trust store (/usr/local/share/ca-certificates), for the build's
 * npm behind a TLS-inspecting proxy (the Dockerfile's BUILD_CA_CERTS); BUILD_CA_CERTS_FILE overrides.
 */
export function buildCaCerts(): string | undefined {
  const file = process.env.BUILD_CA_CERTS_FILE;
  if (file) return readFileSync(file, 'utf8');
  const dir = '/usr/local/share/ca-certificates';
  if (!existsSync(dir)) return undefined;
  const pem = readdirSync(dir)
    .filter((name) => name.endsWith('.crt'))
    .map((name) => readFileSync(join(dir, name), 'utf8').trim())
    .join('\n');
  return pem || undefined;
}

/** `docker build` of the project's Dockerfile (BuildKit), tagged `tag`; its time in seconds. */
export async function buildImage(tag = IMAGE, extraArgs: string[] = []): Promise<{ seconds: number }> {
  const ca = buildCaCerts();
  const args = ['build', '--progress=plain', '-t', tag, ...extraArgs];
  if (ca) args.push('--build-arg', `BUILD_CA_CERTS=${ca}`);
  args.push('.');
  const started = Date.now();
  const result = await docker(args, {
    env: { DOCKER_BUILDKIT: '1' },
    timeoutMs: 20 * 60_000,
    logFile: `build-${tag.replace(/\W/g, '_')}.log`,
  });
  if (result.code !== 0)
    throw new Error(`docker build exited ${result.code}: ${result.stderr.trim().slice(-3000)}`);
  return { seconds: (Date.now() - started) / 1000 };
}

/** The default bridge's gateway: the host's address as containers on the bridge see it. */
export async function bridgeGateway(): Promise<string> {
  return dockerOk(['network', 'inspect', 'bridge', '-f', '{{(index .IPAM.Config 0).Gateway}}']);
}

export interface Relay {
  port: number;
  close(): Promise<void>;
}

/**
 * A TCP relay on `host` (e.g. the bridge gateway) to a service of the host that listens on 127.0.0.1 only
 * (the machine's PostgreSQL and Redis), so a container on the bridge network reaches it.
 */
export function relay(host: string, targetPort: number, targetHost = '127.0.0.1'): Promise<Relay> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((inbound) => {
    const outbound = createConnection(targetPort, targetHost);
    for (const socket of [inbound, outbound]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {
        inbound.destroy();
        outbound.destroy();
      });
    }
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      resolve({
        port: typeof address === 'object' && address ? address.port : 0,
        close: () =>
          new Promise<void>((done) => {
            for (const socket of sockets) socket.destroy();
            server.close(() => done());
          }),
      });
    });
  });
}
