/**
 * The compose stack's Postgres init scripts (deploy/compose/postgres-init/10-roles.sh, then 20-grafana.sh) run against the
 * machine's Postgres, under throw-away names: the migration as the owner role, then what the brokers' role
 * may and may not do, and what Grafana's role may (the dashboard's annotation queries, nothing else). The roles a real stack gets are these, under their default names.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMigrations } from '../../broker/db/migrate.js';
import { checkMigrationsApplied } from '../../broker/db/migration-check.js';
import { createPool } from '../../broker/db/pool.js';
import { acceptBatch } from '../../broker/delivery/accept.js';
import { flagChangeLedger } from '../../broker/flag-changes.js';
import { packageRoot } from '../../broker/paths.js';
import { recordFlagChange } from '../../flags/changes.js';
import { runWorkbench } from '../helpers/cli.js';
import { SERVER_URL } from '../helpers/postgres.js';

const initDir = join(packageRoot(), 'deploy', 'compose', 'postgres-init');
/** The init scripts in the order the Postgres image runs them, with the passwords each one requires. */
const SCRIPTS = {
  '10-roles.sh': [
    'MESH_OWNER_DB_PASSWORD',
    'MESH_BROKER_DB_PASSWORD',
    'MESH_VERIFIER_DB_PASSWORD',
    'UNLEASH_DB_PASSWORD',
  ],
  '20-grafana.sh': ['GRAFANA_DB_PASSWORD'],
};
const prefix = `wb_test_roles_${randomBytes(4).toString('hex')}`;
const names = {
  MESH_DB_NAME: `${prefix}_mesh`,
  MESH_OWNER_ROLE: `${prefix}_owner`,
  MESH_BROKER_ROLE: `${prefix}_broker`,
  MESH_VERIFIER_ROLE: `${prefix}_verifier`,
  UNLEASH_DB_NAME: `${prefix}_unleash`,
  UNLEASH_DB_ROLE: `${prefix}_unleash`,
  GRAFANA_DB_ROLE: `${prefix}_grafana`,
};
const passwords = {
  MESH_OWNER_DB_PASSWORD: `owner-${randomBytes(6).toString('hex')}`,
  MESH_BROKER_DB_PASSWORD: `broker-${randomBytes(6).toString('hex')}`,
  MESH_VERIFIER_DB_PASSWORD: `verifier-${randomBytes(6).toString('hex')}`,
  UNLEASH_DB_PASSWORD: `unleash-${randomBytes(6).toString('hex')}`,
  GRAFANA_DB_PASSWORD: `grafana-${randomBytes(6).toString('hex')}`,
};
const server = new URL(SERVER_URL);

function url(role: string, password: string, database: string): string {
  const u = new URL(SERVER_URL);
  u.username = role;
  u.password = password;
  u.pathname = `/${database}`;
  return u.toString();
}
const ownerUrl = url(names.MESH_OWNER_ROLE, passwords.MESH_OWNER_DB_PASSWORD, names.MESH_DB_NAME);
const brokerUrl = url(names.MESH_BROKER_ROLE, passwords.MESH_BROKER_DB_PASSWORD, names.MESH_DB_NAME);
const verifierUrl = url(names.MESH_VERIFIER_ROLE, passwords.MESH_VERIFIER_DB_PASSWORD, names.MESH_DB_NAME);
const grafanaUrl = url(names.GRAFANA_DB_ROLE, passwords.GRAFANA_DB_PASSWORD, names.MESH_DB_NAME);

function runScript(script: keyof typeof SCRIPTS, env: Record<string, string>) {
  return spawnSync('sh', [join(initDir, script)], {
    encoding: 'utf8',
    env: {
      PATH: process.env.PATH,
      PGHOST: server.hostname,
      PGPORT: server.port || '5432',
      PGPASSWORD: decodeURIComponent(server.password),
      POSTGRES_USER: decodeURIComponent(server.username) || 'postgres',
      ...env,
    },
  });
}

async function as<T>(connectionString: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

/** The SQLSTATE a statement fails with (undefined when it succeeds). */
async function failure(connectionString: string, sql: string): Promise<string | undefined> {
  return as(connectionString, (client) =>
    client.query(sql).then(
      () => undefined,
      (error: { code?: string }) => error.code,
    ),
  );
}

async function cleanUp() {
  await as(SERVER_URL, async (admin) => {
    for (const db of [names.MESH_DB_NAME, names.UNLEASH_DB_NAME])
      await admin.query(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`);
    for (const role of [
      names.MESH_OWNER_ROLE,
      names.MESH_BROKER_ROLE,
      names.MESH_VERIFIER_ROLE,
      names.UNLEASH_DB_ROLE,
      names.GRAFANA_DB_ROLE,
    ])
      await admin.query(`DROP ROLE IF EXISTS "${role}"`);
  });
}

describe('the compose stack database roles (postgres-init/10-roles.sh)', () => {
  beforeAll(async () => {
    for (const script of Object.keys(SCRIPTS) as Array<keyof typeof SCRIPTS>) {
      const made = runScript(script, { ...names, ...passwords });
      expect(made.status, `${script}: ${made.stderr}`).toBe(0);
    }
    const migrated = await runWorkbench(['migrate', '--database-url', ownerUrl]);
    expect(migrated.code, migrated.stderr).toBe(0);
  }, 120_000);
  afterAll(cleanUp);

  it.each(
    Object.entries(SCRIPTS).flatMap(([script, variables]) => variables.map((v) => [script, v] as const)),
  )('%s refuses to run without %s, naming it', (script, variable) => {
    const { [variable]: _left, ...others } = passwords as Record<string, string>;
    const result = runScript(script as keyof typeof SCRIPTS, { ...names, ...others });
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain(variable);
  });

  it('no role it makes is a superuser or may create roles or databases', async () => {
    const roles = await as(SERVER_URL, (admin) =>
      admin.query(
        'SELECT rolname, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname LIKE $1',
        [`${prefix}%`],
      ),
    );
    expect(roles.rows).toHaveLength(5);
    for (const role of roles.rows)
      expect([role.rolsuper, role.rolcreaterole, role.rolcreatedb]).toEqual([false, false, false]);
  });

  it("a broker's start-up check passes with the brokers' role once the owner migrated; the role could not migrate itself", async () => {
    await expect(checkMigrationsApplied(brokerUrl)).resolves.toBeUndefined();
    // Drizzle's migrator begins with CREATE SCHEMA IF NOT EXISTS drizzle: refused, no CREATE on the database.
    await expect(runMigrations(brokerUrl)).rejects.toMatchObject({ cause: { code: '42501' } });
  });

  it("the verifier's role walks the chain (`audit verify`) and changes nothing but its progress", async () => {
    const verified = await runWorkbench(['audit', 'verify', '--json', '--database-url', verifierUrl]);
    expect(verified.code, verified.stderr).toBe(0);
    const denied = '42501';
    expect(await failure(verifierUrl, 'SELECT 1 FROM public.audit_log LIMIT 1')).toBeUndefined();
    expect(await failure(verifierUrl, 'SELECT 1 FROM public.messages LIMIT 1')).toBe(denied);
    expect(await failure(verifierUrl, "INSERT INTO public.meshes (name) VALUES ('x')")).toBe(denied);
    expect(await failure(verifierUrl, 'DELETE FROM public.audit_log')).toBe(denied);
    expect(await failure(verifierUrl, 'CREATE TABLE public.intruder (a int)')).toBe(denied);
    expect(await failure(verifierUrl, 'CREATE TEMP TABLE intruder (a int)')).toBe(denied);
  });

  it("the brokers' role reads and writes rows", async () => {
    const id = await as(brokerUrl, async (client) => {
      const inserted = await client.query("INSERT INTO meshes (name) VALUES ('roles-test') RETURNING id");
      await client.query("UPDATE meshes SET name = 'roles-test-2' WHERE id = $1", [inserted.rows[0].id]);
      return inserted.rows[0].id as string;
    });
    expect(await failure(brokerUrl, `DELETE FROM meshes WHERE id = '${id}'`)).toBeUndefined();
  });

  it("the brokers' role accepts a durable send: accept_messages (a later migration's function), called as the broker calls it", async () => {
    const pool = createPool(brokerUrl, { max: 1 });
    try {
      const mesh = await pool.query("INSERT INTO meshes (name) VALUES ('roles-accept') RETURNING id");
      const meshId = mesh.rows[0].id as string;
      const members = await pool.query<{ id: number; pubkey: string }>(
        "INSERT INTO members (mesh_id, pubkey) VALUES ($1, 'alice'), ($1, 'bob') RETURNING id, pubkey",
        [meshId],
      );
      const [alice, bob] = members.rows;
      const sender = { meshId, memberId: alice!.id, sessionId: randomUUID(), pubkey: 'alice' };
      const [outcome] = await acceptBatch(pool, [{ sender, message: { id: 'm1', to: 'bob', body: 'hi' } }], {
        backlogMax: 10,
      });
      expect(outcome).toMatchObject({ ok: true, value: { recipients: [bob!.id], duplicate: false } });
    } finally {
      await pool.end();
    }
  });

  it("the brokers' role changes no schema and truncates nothing", async () => {
    const denied = '42501'; // insufficient_privilege
    expect(await failure(brokerUrl, 'CREATE TABLE public.intruder (a int)')).toBe(denied);
    expect(await failure(brokerUrl, 'ALTER TABLE meshes ADD COLUMN intruder int')).toBe(denied);
    expect(await failure(brokerUrl, 'DROP TABLE meshes')).toBe(denied);
    expect(await failure(brokerUrl, 'TRUNCATE meshes')).toBe(denied);
    expect(await failure(brokerUrl, 'ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only')).toBe(
      denied,
    );
    expect(await failure(brokerUrl, 'CREATE ROLE intruder')).toBe(denied);
  });

  it("the brokers' role creates nothing anywhere: no schema, no table in any schema, no temp table (issue 25)", async () => {
    const denied = '42501'; // insufficient_privilege
    expect(await failure(brokerUrl, 'CREATE SCHEMA intruder')).toBe(denied);
    expect(await failure(brokerUrl, 'CREATE TABLE drizzle.intruder (a int)')).toBe(denied);
    expect(await failure(brokerUrl, 'CREATE TEMP TABLE audit_log (a int)')).toBe(denied);
    const grants = await as(brokerUrl, (client) =>
      client.query(
        `SELECT has_database_privilege(current_database(), 'CREATE') AS "createOnDatabase",
                has_database_privilege(current_database(), 'TEMPORARY') AS "temporary",
                has_schema_privilege('drizzle', 'CREATE') AS "createOnDrizzle"`,
      ),
    );
    expect(grants.rows[0]).toEqual({ createOnDatabase: false, temporary: false, createOnDrizzle: false });
  });

  it("neither the brokers nor Unleash reach the other's database", async () => {
    const unleashDb = url(names.MESH_BROKER_ROLE, passwords.MESH_BROKER_DB_PASSWORD, names.UNLEASH_DB_NAME);
    await expect(as(unleashDb, async () => 'connected')).rejects.toMatchObject({ code: '42501' });
    const meshAsUnleash = url(names.UNLEASH_DB_ROLE, passwords.UNLEASH_DB_PASSWORD, names.MESH_DB_NAME);
    await expect(as(meshAsUnleash, async () => 'connected')).rejects.toMatchObject({ code: '42501' });
    const unleashOwn = url(names.UNLEASH_DB_ROLE, passwords.UNLEASH_DB_PASSWORD, names.UNLEASH_DB_NAME);
    await expect(failure(unleashOwn, 'CREATE TABLE unleash_can (a int)')).resolves.toBeUndefined();
  });

  it("Grafana's role runs the dashboard's annotation queries and sees flag changes and promotions", async () => {
    const pool = createPool(brokerUrl);
    try {
      await recordFlagChange(flagChangeLedger(pool), {
        environment: 'compose',
        flag: 'ha.clock',
        value: true,
        actor: 'alice',
      });
      // The statement cli/promotion/promote.ts records a promotion with.
      await pool.query(
        'INSERT INTO promotions (environment, from_phase, to_phase, status, failed_check, actor) VALUES ($1, $2, $3, $4, $5, $6)',
        ['compose', 2, 3, 'rolled-back', 'ha.clock leader', 'bob'],
      );
    } finally {
      await pool.end();
    }
    const rows = await as(grafanaUrl, async (client) => {
      const found: Record<string, Array<{ time: Date; text: string; tags: string }>> = {};
      for (const { name, sql } of annotationQueries()) found[name] = (await client.query(sql)).rows;
      return found;
    });
    expect(rows['Flag changes']).toEqual([
      { time: expect.any(Date), text: 'ha.clock off → on by alice (compose)', tags: 'flag,ha.clock,compose' },
    ]);
    expect(rows.Promotions).toEqual([
      {
        time: expect.any(Date),
        text: 'rolled-back: phase 2 → 3 by bob (compose), failed check: ha.clock leader',
        tags: 'promotion,rolled-back,compose',
      },
    ]);
  });

  it("Grafana's role reads no table and changes nothing", async () => {
    const denied = '42501'; // insufficient_privilege
    for (const table of ['audit_log', 'promotions', 'flag_states', 'messages', 'members'])
      expect(await failure(grafanaUrl, `SELECT 1 FROM public.${table} LIMIT 1`), table).toBe(denied);
    expect(await failure(grafanaUrl, 'CREATE TABLE grafana.intruder (a int)')).toBe(denied);
    expect(
      await failure(grafanaUrl, 'CREATE FUNCTION grafana.f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$'),
    ).toBe(denied);
    expect(await failure(grafanaUrl, 'CREATE TEMP TABLE intruder (a int)')).toBe(denied);
  });
});

/**
 * The dashboard's SQL annotations (dashboards/mesh-broker.json) with Grafana's time macros expanded as its
 * Postgres datasource does ($__timeFrom() and $__timeTo(): quoted RFC 3339 instants), over the last hour.
 */
function annotationQueries(): Array<{ name: string; sql: string }> {
  const dashboard = JSON.parse(
    readFileSync(join(packageRoot(), 'dashboards', 'mesh-broker.json'), 'utf8'),
  ) as {
    annotations: { list: Array<{ name: string; target?: { rawSql?: string } }> };
  };
  const instant = (ms: number) => `'${new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z')}'`;
  const now = Date.now();
  return dashboard.annotations.list
    .filter((a) => a.target?.rawSql)
    .map((a) => ({
      name: a.name,
      sql: a
        .target!.rawSql!.replaceAll('$__timeFrom()', instant(now - 3_600_000))
        .replaceAll('$__timeTo()', instant(now + 60_000)),
    }));
}
