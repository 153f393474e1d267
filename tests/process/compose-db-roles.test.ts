/**
 * The compose stack's Postgres init script (deploy/compose/postgres-init/10-roles.sh) run against the
 * machine's Postgres, under throw-away names: the migration as the owner role, then what the brokers' role
 * may and may not do. The roles a real stack gets are these, under their default names.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMigrations } from '../../broker/db/migrate.js';
import { packageRoot } from '../../broker/paths.js';
import { runWorkbench } from '../helpers/cli.js';
import { SERVER_URL } from '../helpers/postgres.js';

const script = join(packageRoot(), 'deploy', 'compose', 'postgres-init', '10-roles.sh');
const prefix = `wb_test_roles_${randomBytes(4).toString('hex')}`;
const names = {
  MESH_DB_NAME: `${prefix}_mesh`,
  MESH_OWNER_ROLE: `${prefix}_owner`,
  MESH_BROKER_ROLE: `${prefix}_broker`,
  UNLEASH_DB_NAME: `${prefix}_unleash`,
  UNLEASH_DB_ROLE: `${prefix}_unleash`,
};
const passwords = {
  MESH_OWNER_DB_PASSWORD: `owner-${randomBytes(6).toString('hex')}`,
  MESH_BROKER_DB_PASSWORD: `broker-${randomBytes(6).toString('hex')}`,
  UNLEASH_DB_PASSWORD: `unleash-${randomBytes(6).toString('hex')}`,
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

function runScript(env: Record<string, string>) {
  return spawnSync('sh', [script], {
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
    for (const role of [names.MESH_OWNER_ROLE, names.MESH_BROKER_ROLE, names.UNLEASH_DB_ROLE])
      await admin.query(`DROP ROLE IF EXISTS "${role}"`);
  });
}

describe('the compose stack database roles (postgres-init/10-roles.sh)', () => {
  beforeAll(async () => {
    const made = runScript({ ...names, ...passwords });
    expect(made.status, made.stderr).toBe(0);
    const migrated = await runWorkbench(['migrate', '--database-url', ownerUrl]);
    expect(migrated.code, migrated.stderr).toBe(0);
  }, 120_000);
  afterAll(cleanUp);

  it('refuses to run without a password, naming it', () => {
    const { MESH_BROKER_DB_PASSWORD: _left, ...others } = passwords;
    const result = runScript({ ...names, ...others });
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain('MESH_BROKER_DB_PASSWORD');
  });

  it('no role it makes is a superuser or may create roles or databases', async () => {
    const roles = await as(SERVER_URL, (admin) =>
      admin.query(
        'SELECT rolname, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname LIKE $1',
        [`${prefix}%`],
      ),
    );
    expect(roles.rows).toHaveLength(3);
    for (const role of roles.rows)
      expect([role.rolsuper, role.rolcreaterole, role.rolcreatedb]).toEqual([false, false, false]);
  });

  it("a broker's start-up migration check passes with the brokers' role once the owner migrated", async () => {
    await expect(runMigrations(brokerUrl)).resolves.toBeUndefined();
  });

  it("the brokers' role reads and writes rows", async () => {
    const id = await as(brokerUrl, async (client) => {
      const inserted = await client.query("INSERT INTO meshes (name) VALUES ('roles-test') RETURNING id");
      await client.query("UPDATE meshes SET name = 'roles-test-2' WHERE id = $1", [inserted.rows[0].id]);
      return inserted.rows[0].id as string;
    });
    expect(await failure(brokerUrl, `DELETE FROM meshes WHERE id = '${id}'`)).toBeUndefined();
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

  it("neither the brokers nor Unleash reach the other's database", async () => {
    const unleashDb = url(names.MESH_BROKER_ROLE, passwords.MESH_BROKER_DB_PASSWORD, names.UNLEASH_DB_NAME);
    await expect(as(unleashDb, async () => 'connected')).rejects.toMatchObject({ code: '42501' });
    const meshAsUnleash = url(names.UNLEASH_DB_ROLE, passwords.UNLEASH_DB_PASSWORD, names.MESH_DB_NAME);
    await expect(as(meshAsUnleash, async () => 'connected')).rejects.toMatchObject({ code: '42501' });
    const unleashOwn = url(names.UNLEASH_DB_ROLE, passwords.UNLEASH_DB_PASSWORD, names.UNLEASH_DB_NAME);
    await expect(failure(unleashOwn, 'CREATE TABLE unleash_can (a int)')).resolves.toBeUndefined();
  });
});
