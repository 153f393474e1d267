/**
 * Phase 3's compose stack under a real container engine (issue 18, item 4; docs/deploy.md § "How it is
 * checked"): Debian's docker-compose 1.29.2 on this checkout's dockerd (scripts/containers/dockerd.sh) runs
 * deploy/compose/compose.yml + phases/phase3/compose.yml, unchanged, as project `mesh-stack-test` (`-p` /
 * COMPOSE_PROJECT_NAME; the files have no top-level `name:`), plus deploy/compose/test-substitutes.yml.
 *
 * What runs:
 * - the project's image `mesh-broker:latest`, built from the Dockerfile here: broker-1..3, `migrate`, the
 *   audit verifier;
 * - postgres:15, redis:7, unleashorg/unleash-server:8.2.0, prom/prometheus:v2.53.0 under those names, but
 *   LOCAL STAND-INS made by scripts/containers/service-images.sh (no registry here): Debian bookworm from
 *   debootstrap with Debian's postgresql-15, redis-server 7.0 and prometheus 2.42 and small entrypoints doing
 *   what the compose file expects of the official images; the npm registry's unleash-server 8.2.0 on the
 *   locally made node:24-bookworm-slim;
 * - the `traefik` service is a SUBSTITUTE: HAProxy (no Traefik binary here), configured from
 *   phases/phase3/traefik.yml by the project's translation (cli/cluster/haproxy.ts) plus /admin → 403 as
 *   traefik/admin-closed.yml does;
 * - Grafana is not started (no image, no substitute), nor the `client` (profile load).
 *
 * Steps: up (every service but grafana) with MESH_FLAGS_PHASE=2 (phase 3's topology on phase 2's flags, the
 * state after the topology step of a 2 → 3 promotion, docs/deploy.md §4) and wait until every service is
 * healthy and `migrate` exited 0; from the host through environments/compose.json: `flags seed --phase 2`,
 * `status`, `smoke --phase 2`; then `promote --to 3` through a copy of environments/compose.json that differs
 * only in `"phase": 2` (the doc's "if you deploy another phase first, set `phase` to that phase") and its
 * control script's absolute path; `smoke --phase 3` through the file itself; the load balancer's routing and
 * /admin refusal, Prometheus's targets; `docker restart` of broker-2 (drains on SIGTERM, comes back healthy) and
 * `smoke --phase 3` again; then teardown: `down -v` (containers, networks, volumes), the images it made when
 * COMPOSE_TEST_REMOVE_IMAGES=1, and the daemon if this test started it. Timings go to
 * test-results/containers/compose-stack.json; the stack's logs to compose-stack-logs.txt.
 *
 * NOT covered: the official images themselves (their entrypoints, versions — Prometheus 2.42 runs under the
 * v2.53.0 tag — users and defaults); Traefik (its file provider, health checks, `traefik healthcheck`, metrics)
 * and Grafana; current Docker Compose v2 (only 1.29.2 runs here); phases 0, 1, 2 and 4 as stacks and the
 * override swap of a topology change (phase 3 → 4 adds broker-4); a rollback; a second `up` on existing
 * volumes (the init script only runs once); the `client` (profile load); TLS and anything but 127.0.0.1;
 * a fresh clone (the images and the base's debootstrap cache are reused when present).
 *
 * `npm run test:containers` (not part of `npm test`): needs root, Debian's docker.io, docker-compose and
 * debootstrap, the npm registry and Debian's mirror, and the host ports of environments/compose.json free.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { haproxyConfig } from '../../cli/cluster/haproxy.js';
import { readTraefik } from '../../cli/cluster/traefik.js';
import {
  buildImage,
  type Daemon,
  DOCKER,
  DOCKER_HOST,
  docker,
  dockerOk,
  ensureBaseImage,
  IMAGE,
  LOG_DIR,
  missingPrerequisites,
  ROOT,
  type Run,
  run,
  startDaemon,
} from '../helpers/docker.js';
import { writeEnvironmentFile } from '../helpers/environments.js';

const PROJECT = process.env.COMPOSE_TEST_PROJECT ?? 'mesh-stack-test';
const COMPOSE = '/usr/bin/docker-compose';
const FILES = [
  'deploy/compose/compose.yml',
  'phases/phase3/compose.yml',
  // Redis on the host's loopback: the workbench's "refresh now" push from the host (not published by default).
  'deploy/compose/redis-host-port.yml',
  'deploy/compose/test-substitutes.yml',
];
/** Services not started: no image can be had here (see the header). */
const LEFT_OUT = new Set(['grafana']);
const REMOVE_IMAGES = process.env.COMPOSE_TEST_REMOVE_IMAGES === '1';
const MAIN = join(ROOT, 'dist', 'cli', 'main.js');
const environmentFile = JSON.parse(readFileSync(join(ROOT, 'environments', 'compose.json'), 'utf8')) as {
  lbUrl: string;
  nodes: Array<{ id: string; url: string }>;
  flags: { url: string };
  control?: Record<string, string>;
};

const timings: Record<string, number | string> = {};
let daemon: Daemon | undefined;
let work = '';
let secrets: Record<string, string> = {};
let upAttempted = false;
let workbenchRuns = 0;

function note(key: string, value: number | string): void {
  timings[key] = typeof value === 'number' ? Number(value.toFixed(1)) : value;
  console.log(`compose-stack: ${key} = ${timings[key]}`);
}

async function timed<T>(key: string, action: () => Promise<T>): Promise<T> {
  const started = Date.now();
  try {
    return await action();
  } finally {
    note(key, (Date.now() - started) / 1000);
  }
}

/** Every `${VAR:?…}` of the compose files, with a fresh value (Unleash tokens in their formats). */
function makeSecrets(): Record<string, string> {
  const names = new Set<string>();
  for (const file of FILES) {
    for (const match of readFileSync(join(ROOT, file), 'utf8').matchAll(/\$\{([A-Z0-9_]+):\?/g))
      names.add(match[1]!);
  }
  const values: Record<string, string> = {};
  for (const name of names) values[name] = randomBytes(24).toString('hex');
  values.UNLEASH_ADMIN_TOKEN = `*:*.${randomBytes(24).toString('hex')}`;
  values.UNLEASH_BACKEND_TOKEN = `default:development.${randomBytes(24).toString('hex')}`;
  values.MESH_TEST_HAPROXY_CFG = join(work, 'haproxy.cfg');
  return values;
}

function composeEnv(): NodeJS.ProcessEnv {
  return {
    ...secrets,
    COMPOSE_PROJECT_NAME: PROJECT,
    MESH_FLAGS_PHASE: '2',
    MESH_ENV: 'compose',
    DOCKER_HOST,
  };
}

function compose(args: string[], timeoutMs = 10 * 60_000): Promise<Run> {
  return run(COMPOSE, ['-p', PROJECT, ...FILES.flatMap((file) => ['-f', file]), ...args], {
    env: composeEnv(),
    timeoutMs,
  });
}

async function composeOk(args: string[], timeoutMs?: number): Promise<string> {
  const result = await compose(args, timeoutMs);
  if (result.code !== 0)
    throw new Error(`docker-compose ${args.join(' ')} exited ${result.code}: ${result.stderr.slice(-3000)}`);
  return result.stdout;
}

/** The workbench on the host (dist/), from `cwd` (whose environments/compose.json it reads). */
function workbench(args: string[], cwd = ROOT, timeoutMs = 10 * 60_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], {
      cwd,
      env: {
        ...process.env,
        ADMIN_TOKEN: secrets.ADMIN_TOKEN,
        UNLEASH_ADMIN_TOKEN: secrets.UNLEASH_ADMIN_TOKEN,
        MESH_COMPOSE_DATABASE_URL: `postgres://mesh_broker:${secrets.MESH_BROKER_DB_PASSWORD}@127.0.0.1:15432/meshbroker`,
        MESH_COMPOSE_REDIS_URL: `redis://broker:${secrets.MESH_REDIS_PASSWORD}@127.0.0.1:16379`,
        WORKBENCH_ACTOR: 'compose-stack-test',
        // control.sh (environments/compose.json's node control): this project, Debian's client, this daemon.
        COMPOSE_PROJECT_NAME: PROJECT,
        DOCKER,
        DOCKER_HOST,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs).unref();
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      mkdirSync(LOG_DIR, { recursive: true });
      writeFileSync(
        join(LOG_DIR, `compose-stack-workbench-${++workbenchRuns}-${args[0]}.log`),
        `$ workbench ${args.join(' ')}\n${stdout}${stderr}`,
      );
      resolve({ code: code ?? 1, stdout, stderr });
    });
  });
}

function expectPassed(result: Run, what: string): void {
  if (result.code !== 0) console.log(`${what}:\n${result.stdout}\n${result.stderr}`);
  expect(result.code, `${what}: ${result.stdout.slice(-3000)}${result.stderr.slice(-2000)}`).toBe(0);
}

interface ContainerState {
  service: string;
  status: string;
  health: string;
  exitCode: number;
}

async function containers(): Promise<ContainerState[]> {
  const ids = (
    await dockerOk(['ps', '-aq', '--filter', `label=com.docker.compose.project=${PROJECT}`])
  ).split(/\s+/);
  const states: ContainerState[] = [];
  for (const id of ids.filter(Boolean)) {
    const [service, status, health, exitCode] = (
      await dockerOk([
        'inspect',
        '-f',
        '{{index .Config.Labels "com.docker.compose.service"}}|{{.State.Status}}|{{if .State.Health}}{{.State.Health.Status}}{{end}}|{{.State.ExitCode}}',
        id,
      ])
    ).split('|');
    states.push({ service: service!, status: status!, health: health!, exitCode: Number(exitCode) });
  }
  return states;
}

/** Until every container is healthy (the one-shot `migrate`: exited 0); throws naming the laggards. */
async function waitHealthy(services: string[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let pending: string[] = services;
  while (Date.now() < deadline) {
    const states = await containers();
    pending = services.filter((service) => {
      const state = states.find((s) => s.service === service);
      if (!state) return true;
      if (service === 'migrate') {
        if (state.status === 'exited' && state.exitCode !== 0)
          throw new Error(`migrate exited ${state.exitCode}`);
        return !(state.status === 'exited' && state.exitCode === 0);
      }
      return state.health !== 'healthy';
    });
    if (pending.length === 0) return;
    await new Promise((done) => setTimeout(done, 1000));
  }
  const states = await containers();
  throw new Error(
    `not healthy after ${timeoutMs / 1000} s: ${pending
      .map((service) => {
        const state = states.find((s) => s.service === service);
        return `${service} (${state ? `${state.status} ${state.health}` : 'no container'})`;
      })
      .join(', ')}`,
  );
}

/** HAProxy's configuration for the `traefik` service: phases/phase3/traefik.yml through cli/cluster/haproxy.ts. */
function substituteLoadBalancer(): string {
  const traefik = readTraefik(join(ROOT, 'phases', 'phase3', 'traefik.yml'));
  const addresses: Record<string, string> = {};
  for (const service of Object.values(traefik.services)) {
    if (service.kind !== 'loadBalancer') continue;
    for (const url of service.servers) {
      const parsed = new URL(url);
      addresses[parsed.hostname] = `${parsed.hostname}:${parsed.port || '80'}`;
    }
  }
  const translated = haproxyConfig(traefik, { bind: ':80', addresses })
    .replace(
      '# Generated from the phase Traefik file by `workbench up`; edit the Traefik file, not this.',
      '# SUBSTITUTE for Traefik, made by tests/containers/compose-stack.test.ts from phases/phase3/traefik.yml\n# (cli/cluster/haproxy.ts) and deploy/compose/traefik/admin-closed.yml (the /admin rule below).',
    )
    // Brokers are found through Docker's DNS, also when one is not up yet at HAProxy's start.
    .replace(/^( {2}server .*)$/gm, '$1 resolvers docker init-addr last,libc,none')
    // traefik/admin-closed.yml: /admin through the load balancer is refused with 403, above every route.
    .replace(/^( {2}bind :80)$/m, '$1\n  http-request deny deny_status 403 if { path_beg /admin }');
  return [
    translated.trimEnd(),
    'resolvers docker',
    '  nameserver dns 127.0.0.11:53',
    '  hold valid 1s',
    'frontend health',
    '  bind :8404',
    '  monitor-uri /healthz',
    '',
  ].join('\n');
}

beforeAll(async () => {
  const missing = missingPrerequisites();
  if (!existsSync(COMPOSE)) missing.push('apt-get install -y docker-compose');
  if (missing.length > 0) throw new Error(`the compose test needs: ${missing.join('; ')}`);
  work = mkdtempSync(join(tmpdir(), 'compose-stack-'));
  secrets = makeSecrets();
  writeFileSync(secrets.MESH_TEST_HAPROXY_CFG!, substituteLoadBalancer());

  const begun = Date.now();
  daemon = await timed('dockerdSeconds', () => startDaemon());
  note('dockerd', daemon.startedHere ? 'started here' : 'already running (left running)');
  const base = await ensureBaseImage();
  note('baseImage', base.made ? `made in ${base.seconds.toFixed(1)} s` : 'present');
  await timed('brokerImageBuildSeconds', () => buildImage(IMAGE));
  await timed('serviceImagesSeconds', async () => {
    const result = await run('bash', [join(ROOT, 'scripts', 'containers', 'service-images.sh')], {
      timeoutMs: 20 * 60_000,
      logFile: 'service-images.log',
    });
    if (result.code !== 0)
      throw new Error(`service-images.sh exited ${result.code}: ${result.stderr.slice(-3000)}`);
  });
  await timed('hostBuildSeconds', async () => {
    const result = await run('npm', ['run', '--silent', 'build'], { timeoutMs: 5 * 60_000 });
    if (result.code !== 0)
      throw new Error(`npm run build exited ${result.code}: ${result.stdout}${result.stderr}`);
  });
  note('imagesAndBuildsSeconds', (Date.now() - begun) / 1000);

  // Every service of the merged files but those left out and those of a profile (`client`: profile load).
  const merged = parse(await composeOk(['config'])) as {
    services: Record<string, { profiles?: string[] }>;
  };
  const started = Object.entries(merged.services)
    .filter(([service, definition]) => !LEFT_OUT.has(service) && !definition.profiles?.length)
    .map(([service]) => service);
  note('services', started.join(' '));
  upAttempted = true;
  await timed('stackUpSeconds', async () => {
    await composeOk(['up', '-d', '--no-color', ...started], 15 * 60_000);
    await waitHealthy(started, 5 * 60_000);
  });
}, 60 * 60_000);

afterAll(async () => {
  const started = Date.now();
  try {
    if (upAttempted) {
      const logs = await compose(['logs', '--no-color', '--timestamps', '--tail', '400'], 120_000);
      mkdirSync(LOG_DIR, { recursive: true });
      writeFileSync(join(LOG_DIR, 'compose-stack-logs.txt'), `${logs.stdout}${logs.stderr}`);
      const down = await compose(['down', '-v', '--remove-orphans', '--timeout', '20'], 5 * 60_000);
      if (down.code !== 0) console.error(`docker-compose down exited ${down.code}: ${down.stderr}`);
      const left = await docker(['ps', '-aq', '--filter', `label=com.docker.compose.project=${PROJECT}`]);
      if (left.stdout.trim()) console.error(`containers left: ${left.stdout}`);
    }
    if (REMOVE_IMAGES) {
      await run('bash', [join(ROOT, 'scripts', 'containers', 'service-images.sh'), '--remove']);
      await docker(['image', 'rm', IMAGE]);
    }
  } finally {
    await daemon?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
    note('teardownSeconds', (Date.now() - started) / 1000);
    mkdirSync(LOG_DIR, { recursive: true });
    writeFileSync(join(LOG_DIR, 'compose-stack.json'), `${JSON.stringify(timings, null, 2)}\n`);
  }
}, 10 * 60_000);

describe('phase 3 compose stack', () => {
  it('every service but Grafana runs; the brokers run the project image as the brokers role', async () => {
    const states = await containers();
    expect(states.map((state) => state.service).sort()).toEqual([
      'audit-verifier',
      'broker-1',
      'broker-2',
      'broker-3',
      'migrate',
      'postgres',
      'prometheus',
      'redis',
      'traefik',
      'unleash',
    ]);
    for (const node of environmentFile.nodes) {
      const health = await fetch(`${node.url}/health`);
      expect(health.status, node.id).toBe(200);
      const [image, env] = (
        await dockerOk([
          'inspect',
          '-f',
          '{{.Config.Image}}|{{range .Config.Env}}{{.}} {{end}}',
          `${PROJECT}_${node.id}_1`,
        ])
      ).split('|');
      expect(image).toBe(IMAGE);
      expect(env).toMatch(/DATABASE_URL=postgres:\/\/mesh_broker:/);
    }
  });

  it(
    'flags seed, status and smoke --phase 2 pass through environments/compose.json',
    async () => {
      const seed = await timed('flagsSeedSeconds', () =>
        workbench(['flags', 'seed', '--env', 'compose', '--phase', '2']),
      );
      expectPassed(seed, 'flags seed');
      const status = await workbench(['status', '--env', 'compose']);
      expectPassed(status, 'status');
      const smoke = await timed('smokePhase2Seconds', () =>
        workbench(['smoke', '--phase', '2', '--env', 'compose']),
      );
      expectPassed(smoke, 'smoke --phase 2');
    },
    15 * 60_000,
  );

  it(
    'promote --to 3 promotes (phase 2 checks, preset written to Unleash, phase 3 checks)',
    async () => {
      // environments/compose.json as an operator who deployed phase 2's flags first has it (docs/deploy.md §3).
      const dir = join(work, 'promote');
      const copy = { ...environmentFile, phase: 2 } as Record<string, unknown>;
      if (environmentFile.control) {
        copy.control = Object.fromEntries(
          Object.entries(environmentFile.control).map(([action, command]) => [
            action,
            command.replace('../deploy/compose/control.sh', join(ROOT, 'deploy', 'compose', 'control.sh')),
          ]),
        );
      }
      writeEnvironmentFile(dir, 'compose', copy);
      const promoted = await timed('promoteSeconds', () =>
        workbench(['promote', '--env', 'compose', '--to', '3'], dir),
      );
      expectPassed(promoted, 'promote --to 3');
      expect(promoted.stdout).toContain('promoted compose from phase 2 to phase 3');
      const smoke = await timed('smokePhase3Seconds', () =>
        workbench(['smoke', '--phase', '3', '--env', 'compose']),
      );
      expectPassed(smoke, 'smoke --phase 3');
    },
    20 * 60_000,
  );

  it('the load balancer substitute routes to the brokers and refuses /admin; Prometheus scrapes the phase', async () => {
    const health = await fetch(`${environmentFile.lbUrl}/health`);
    expect(health.status).toBe(200);
    const admin = await fetch(`${environmentFile.lbUrl}/admin/flags`, {
      headers: { authorization: `Bearer ${secrets.ADMIN_TOKEN}` },
    });
    expect(admin.status).toBe(403);
    // Prometheus: every broker of the phase and the verifier, up (a scrape every 5 s).
    let up: string[] = [];
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      const answer = (await (await fetch('http://127.0.0.1:19090/api/v1/targets')).json()) as {
        data: { activeTargets: Array<{ labels: { instance: string }; health: string }> };
      };
      up = answer.data.activeTargets
        .filter((target) => target.health === 'up')
        .map((target) => target.labels.instance)
        .sort();
      if (up.length === 4) break;
      await new Promise((done) => setTimeout(done, 2000));
    }
    expect(up).toEqual(['audit-verifier:9464', 'broker-1:8080', 'broker-2:8080', 'broker-3:8080']);
    // The shipped alert rules (dashboards/alerts), loaded from the mount, and none firing on the stack but
    // the one the smoke runs cause on purpose: their node-kill checks kill the lease holder (more than 3
    // takeovers in 15 minutes over two smoke runs), which is what MeshActiveLeaseFlapping pages on.
    const causedBySmoke = new Set(['MeshActiveLeaseFlapping']);
    const shipped = [
      ...readFileSync(join(ROOT, 'dashboards', 'alerts', 'mesh-broker.rules.yml'), 'utf8').matchAll(
        /^\s*- alert: (\S+)/gm,
      ),
    ].map((match) => match[1]!);
    const rules = (await (await fetch('http://127.0.0.1:19090/api/v1/rules?type=alert')).json()) as {
      data: { groups: Array<{ rules: Array<{ name: string; state: string }> }> };
    };
    const loaded = rules.data.groups.flatMap((group) => group.rules);
    expect(loaded.map((rule) => rule.name).sort()).toEqual([...shipped].sort());
    expect(
      loaded
        .filter((rule) => rule.state === 'firing' && !causedBySmoke.has(rule.name))
        .map((rule) => rule.name),
    ).toEqual([]);
  }, 120_000);

  it(
    'a restarted broker container drains, comes back healthy, and smoke still passes',
    async () => {
      const id = (
        await dockerOk([
          'ps',
          '-q',
          '--filter',
          `label=com.docker.compose.project=${PROJECT}`,
          '--filter',
          'label=com.docker.compose.service=broker-2',
        ])
      ).trim();
      expect(id).not.toBe('');
      const since = Math.floor(Date.now() / 1000);
      await timed('restartSeconds', async () => {
        await dockerOk(['restart', '--time', '20', id], { timeoutMs: 60_000 });
        await waitHealthy(['broker-2'], 120_000);
      });
      // The stop half of the restart: SIGTERM to PID 1 drained the node; it exited 0 (not SIGKILLed, 137).
      const events = await dockerOk([
        'events',
        '--since',
        String(since),
        '--until',
        String(Math.ceil(Date.now() / 1000)),
        '--filter',
        `container=${id}`,
        '--filter',
        'event=die',
        '--format',
        '{{.Actor.Attributes.exitCode}}',
      ]);
      expect(events.split(/\s+/).filter(Boolean)).toEqual(['0']);
      const logs = await docker(['logs', '--tail', '400', id]);
      expect(`${logs.stdout}${logs.stderr}`).toMatch(/draining/);
      const smoke = await timed('smokeAfterRestartSeconds', () =>
        workbench(['smoke', '--phase', '3', '--env', 'compose']),
      );
      expectPassed(smoke, 'smoke --phase 3 after the restart');
    },
    15 * 60_000,
  );
});
