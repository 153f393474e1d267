/**
 * Phase 4's database under a real container engine (issue 25 item 4; docs/deploy.md § Phase 4's database):
 * Debian's docker-compose 1.29.2 on this checkout's dockerd (scripts/containers/dockerd.sh) brings up, from
 * deploy/compose/compose.yml + phases/phase4/compose.yml unchanged, only the database part: `postgres` (the
 * HAProxy balancer) and what it depends on, `etcd`, `patroni-1` and `patroni-2`. The images are the local
 * ones of scripts/containers/service-images.sh (mesh-local/patroni:15 with Debian's patroni, postgresql-15
 * and python3-etcd; STAND-INS for quay.io/coreos/etcd:v3.4.23 and haproxy:2.6 from Debian's packages).
 *
 * Steps: up, wait until the balancer is healthy (a leader is up) and both members run (a leader, a
 * streaming replica); through the balancer's host port, as the stack's roles: the roles exist and are no
 * superusers (mesh_broker connects with its password), the owner writes a row; the leader's container is
 * killed (SIGKILL: a crash, its leader key left to expire); the other member is promoted by Patroni and the
 * balancer's write port reaches it: the first row is there and a second write succeeds; the killed member
 * started again rejoins as a replica. Teardown: `down -v`, and the daemon if this test started it.
 *
 * NOT covered: the brokers on this database (the phase 3 stack test runs brokers; here no broker image is
 * built), synchronous mode (the simulation's tests/cluster/regions-patroni.test.ts measures both modes),
 * the read port's routing, the phase 3 → 4 dump and restore, the official images.
 *
 * `npx vitest run --config tests/containers/vitest.config.ts tests/containers/phase4-database.test.ts`
 * (not part of `npm test`): needs root, Debian's docker.io, docker-compose and debootstrap, and Debian's
 * mirror and the npm registry when the images are not made yet.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Daemon,
  docker,
  ensureBaseImage,
  LOG_DIR,
  missingPrerequisites,
  ROOT,
  type Run,
  run,
  startDaemon,
} from '../helpers/docker.js';
import { freePort } from '../helpers/ports.js';

const PROJECT = 'mesh-phase4-db-test';
const COMPOSE = '/usr/bin/docker-compose';
const FILES = ['deploy/compose/compose.yml', 'phases/phase4/compose.yml'];
const MEMBERS = ['patroni-1', 'patroni-2'] as const;
const PATRONICTL = ['patronictl', '-c', '/var/lib/postgresql/patroni.yml'];

let daemon: Daemon | undefined;
let secrets: Record<string, string> = {};
let port = 0;
let upAttempted = false;

/** Every `${VAR:?…}` of the compose files, with a fresh value. */
function makeSecrets(): Record<string, string> {
  const values: Record<string, string> = {};
  for (const file of FILES)
    for (const match of readFileSync(join(ROOT, file), 'utf8').matchAll(/\$\{([A-Z0-9_]+):\?/g))
      values[match[1]!] = randomBytes(24).toString('hex');
  return values;
}

function compose(args: string[], timeoutMs = 10 * 60_000): Promise<Run> {
  return run(COMPOSE, ['-p', PROJECT, ...FILES.flatMap((file) => ['-f', file]), ...args], {
    env: { ...secrets, COMPOSE_PROJECT_NAME: PROJECT, MESH_POSTGRES_PORT: String(port) },
    timeoutMs,
  });
}

async function composeOk(args: string[], timeoutMs?: number): Promise<string> {
  const result = await compose(args, timeoutMs);
  if (result.code !== 0)
    throw new Error(`docker-compose ${args.join(' ')} exited ${result.code}: ${result.stderr.slice(-3000)}`);
  return result.stdout;
}

async function until<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline)
      throw new Error(`${what} within ${timeoutMs / 1000} s (last: ${String(last)})`);
    await new Promise((done) => setTimeout(done, 1000));
  }
}

/** A row of `patronictl list` (Patroni 3.0: a replica's State is `running` too; later ones say `streaming`). */
interface Member {
  Member: string;
  Role: string;
  State: string;
}

/** Patroni's view of the cluster (`patronictl list`), asked of a member that runs. */
async function cluster(via: string): Promise<Member[]> {
  return JSON.parse(await composeOk(['exec', '-T', via, ...PATRONICTL, 'list', '-f', 'json'], 30_000));
}

/** psql on the host through the balancer's published write port, as `role` (its password from `secrets`). */
async function sql(role: string, password: string, query: string): Promise<string> {
  const result = await run(
    'psql',
    ['-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-h', '127.0.0.1', '-p', String(port), '-U', role],
    {
      env: { PGPASSWORD: password, PGDATABASE: 'meshbroker', PGCONNECT_TIMEOUT: '5' },
      input: query,
      timeoutMs: 30_000,
    },
  );
  if (result.code !== 0) throw new Error(`psql as ${role} exited ${result.code}: ${result.stderr.trim()}`);
  return result.stdout.trim();
}

async function balancerHealth(): Promise<string> {
  const id = (await composeOk(['ps', '-q', 'postgres'])).trim();
  if (!id) return 'no container';
  return (await docker(['inspect', '-f', '{{.State.Health.Status}}', id])).stdout.trim();
}

beforeAll(async () => {
  const missing = missingPrerequisites();
  if (!existsSync(COMPOSE)) missing.push('apt-get install -y docker-compose');
  if (missing.length > 0) throw new Error(`the phase 4 database test needs: ${missing.join('; ')}`);
  secrets = makeSecrets();
  port = await freePort();
  daemon = await startDaemon();
  await ensureBaseImage();
  const images = await run('bash', [join(ROOT, 'scripts', 'containers', 'service-images.sh')], {
    timeoutMs: 30 * 60_000,
    logFile: 'service-images.log',
  });
  if (images.code !== 0)
    throw new Error(`service-images.sh exited ${images.code}: ${images.stderr.slice(-3000)}`);
  upAttempted = true;
  // `postgres` (the balancer) brings its dependencies: etcd, then both Patroni members.
  await composeOk(['up', '-d', '--no-color', 'postgres'], 10 * 60_000);
  await until('the balancer healthy (a leader up)', 5 * 60_000, async () =>
    (await balancerHealth()) === 'healthy' ? true : undefined,
  );
}, 60 * 60_000);

afterAll(async () => {
  try {
    if (upAttempted) {
      const logs = await compose(['logs', '--no-color', '--timestamps', '--tail', '300'], 120_000);
      mkdirSync(LOG_DIR, { recursive: true });
      writeFileSync(join(LOG_DIR, 'phase4-database-logs.txt'), `${logs.stdout}${logs.stderr}`);
      const down = await compose(['down', '-v', '--remove-orphans', '--timeout', '20'], 5 * 60_000);
      if (down.code !== 0) console.error(`docker-compose down exited ${down.code}: ${down.stderr}`);
    }
  } finally {
    await daemon?.stop();
  }
}, 10 * 60_000);

describe("phase 4's database: Patroni elects, HAProxy follows the leader", () => {
  let leader = '';
  let replica = '';

  it(
    "runs a leader and a streaming replica; the roles are the stack's and the owner writes through the balancer",
    async () => {
      const members = await until('a leader and a streaming replica', 3 * 60_000, async () => {
        const list = await cluster('patroni-1');
        const lead = list.find((m) => m.Role === 'Leader' && m.State === 'running');
        const follower = list.find((m) => m.Role !== 'Leader' && m.State === 'running');
        return lead && follower ? { lead, follower } : undefined;
      });
      leader = members.lead.Member;
      replica = members.follower.Member;
      expect(MEMBERS).toContain(leader);
      expect(MEMBERS).toContain(replica);
      // The brokers' role connects through the balancer with its password and is no superuser.
      expect(
        await sql(
          'mesh_broker',
          secrets.MESH_BROKER_DB_PASSWORD!,
          'SELECT rolsuper FROM pg_roles WHERE rolname = current_user',
        ),
      ).toBe('f');
      const roles = await sql(
        'mesh_owner',
        secrets.MESH_OWNER_DB_PASSWORD!,
        "SELECT string_agg(rolname || ':' || rolsuper, ',' ORDER BY rolname) FROM pg_roles WHERE rolname IN ('mesh_owner', 'mesh_broker', 'mesh_verifier', 'mesh_grafana', 'unleash')",
      );
      expect(roles).toBe(
        'mesh_broker:false,mesh_grafana:false,mesh_owner:false,mesh_verifier:false,unleash:false',
      );
      expect(await sql('mesh_owner', secrets.MESH_OWNER_DB_PASSWORD!, 'SELECT pg_is_in_recovery()')).toBe(
        'f',
      );
      await sql(
        'mesh_owner',
        secrets.MESH_OWNER_DB_PASSWORD!,
        "CREATE TABLE failover_probe (v text); INSERT INTO failover_probe VALUES ('before');",
      );
      // The replica has it before the crash (asynchronous mode: otherwise a crash may lose it, by design).
      await until('the replica to replay the write', 60_000, async () => {
        const list = await cluster(replica);
        const lag = (list.find((m) => m.Member === replica) as unknown as { 'Lag in MB'?: number })?.[
          'Lag in MB'
        ];
        return lag === 0 ? true : undefined;
      });
    },
    5 * 60_000,
  );

  it(
    'the leader crashes: Patroni promotes the other member and the balancer writes to it',
    async () => {
      expect(leader).not.toBe('');
      const killedAt = Date.now();
      await composeOk(['kill', '-s', 'SIGKILL', leader], 60_000);
      await until(`${replica} promoted`, 2 * 60_000, async () => {
        const list = await cluster(replica);
        return list.some((m) => m.Member === replica && m.Role === 'Leader' && m.State === 'running')
          ? true
          : undefined;
      });
      await until('a write through the balancer', 60_000, () =>
        sql(
          'mesh_owner',
          secrets.MESH_OWNER_DB_PASSWORD!,
          "INSERT INTO failover_probe VALUES ('after')",
        ).then(() => true),
      );
      console.log(
        `phase4-database: writes through the balancer again ${((Date.now() - killedAt) / 1000).toFixed(1)} s after the kill`,
      );
      expect(
        await sql(
          'mesh_owner',
          secrets.MESH_OWNER_DB_PASSWORD!,
          "SELECT string_agg(v, ',' ORDER BY v) FROM failover_probe",
        ),
      ).toBe('after,before');
      expect(await sql('mesh_broker', secrets.MESH_BROKER_DB_PASSWORD!, 'SELECT pg_is_in_recovery()')).toBe(
        'f',
      );
    },
    4 * 60_000,
  );

  it(
    'the old leader, started again, rejoins as a replica',
    async () => {
      await composeOk(['start', leader], 60_000);
      await until(`${leader} streaming from ${replica}`, 3 * 60_000, async () => {
        const list = await cluster(replica);
        return list.some((m) => m.Member === leader && m.Role !== 'Leader' && m.State === 'running')
          ? true
          : undefined;
      });
      expect(await balancerHealth()).toBe('healthy');
    },
    4 * 60_000,
  );
});
