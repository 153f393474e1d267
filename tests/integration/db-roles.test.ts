/**
 * The database roles are least privilege for real (issue 25 item 5; docs/design.md § Database roles), on the
 * machine's Postgres, in a database migrated the way `workbench up` and the tests migrate one (migration 0014
 * makes the roles when the server has none and grants them in this database):
 *
 * - `mesh_broker` creates nothing anywhere (no schema, no table in any schema, no temp table, no function),
 *   reads and appends the audit chain only, and never touches the verifier's progress;
 * - `mesh_verifier` reads the chain and keeps its progress, and changes nothing else;
 * - every function of public resolves names on a pinned search_path;
 * - a shadow `audit_log` in a schema put first on the database's search_path captures neither a broker's
 *   appends nor the verifier's reads: a node connected as `mesh_broker` sends a DM end to end, its
 *   `message.sent` lands in public.audit_log, and `workbench audit verify` as `mesh_verifier` reads that one;
 * - a node refuses to start on a database whose migrations are behind (brokers run no DDL), unless
 *   MIGRATE_ON_START asks it to migrate (the dev convenience).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BROKER_ROLE, databaseUrlAs, VERIFIER_ROLE } from '../../broker/db/roles.js';
import type { TestNode } from '../helpers/broker.js';
import { runWorkbench } from '../helpers/cli.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, SERVER_URL, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const DENIED = '42501'; // insufficient_privilege

let db: TestDatabase;
let brokerUrl: string;
let verifierUrl: string;
const nodes: TestNode[] = [];

beforeAll(async () => {
  db = await createTestDatabase('db_roles');
  brokerUrl = databaseUrlAs(db.url, BROKER_ROLE);
  verifierUrl = databaseUrlAs(db.url, VERIFIER_ROLE);
});
afterAll(async () => {
  closeAllClients();
  for (const node of nodes) await node.stop();
  await db?.drop();
});

async function as<T>(connectionString: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

/** The SQLSTATE a statement fails with as the URL's role (undefined when it succeeds). */
function failure(connectionString: string, sql: string): Promise<string | undefined> {
  return as(connectionString, (client) =>
    client.query(sql).then(
      () => undefined,
      (error: { code?: string }) => error.code,
    ),
  );
}

/** Per table of public, the privileges the URL's role has on it (of SELECT, INSERT, UPDATE, DELETE, TRUNCATE). */
async function tablePrivileges(connectionString: string): Promise<Record<string, string[]>> {
  const { rows } = await as(connectionString, (client) =>
    client.query<{ table: string; privileges: string[] }>(
      `SELECT t.tablename AS "table",
              ARRAY(SELECT p FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) p
                     WHERE has_table_privilege(format('public.%I', t.tablename), p)) AS privileges
         FROM pg_tables t WHERE t.schemaname = 'public' ORDER BY 1`,
    ),
  );
  return Object.fromEntries(rows.map((r) => [r.table, r.privileges]));
}

describe.each([
  ['mesh_broker', () => brokerUrl],
  ['mesh_verifier', () => verifierUrl],
])('%s creates nothing anywhere', (_role, urlOf) => {
  it('no schema, no table in public, drizzle or any other schema, no temp table, no function', async () => {
    const url = urlOf();
    expect(await failure(url, 'CREATE SCHEMA intruder')).toBe(DENIED);
    expect(await failure(url, 'CREATE TABLE public.intruder (a int)')).toBe(DENIED);
    expect(await failure(url, 'CREATE TABLE drizzle.intruder (a int)')).toBe(DENIED);
    expect(await failure(url, 'CREATE TEMP TABLE audit_log (a int)')).toBe(DENIED);
    expect(await failure(url, 'CREATE FUNCTION public.f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$')).toBe(
      DENIED,
    );
    const creatable = await as(url, (client) =>
      client.query(
        `SELECT has_database_privilege(current_database(), 'CREATE') AS "onDatabase",
                has_database_privilege(current_database(), 'TEMPORARY') AS "temporary",
                ARRAY(SELECT nspname::text FROM pg_namespace WHERE has_schema_privilege(oid, 'CREATE')) AS schemas`,
      ),
    );
    expect(creatable.rows[0]).toEqual({ onDatabase: false, temporary: false, schemas: [] });
  });
});

describe('what each role may do to the rows', () => {
  it('mesh_broker: rows of every table it uses; audit_log read and appended only; not the verifier progress', async () => {
    const privileges = await tablePrivileges(brokerUrl);
    expect(privileges.audit_log).toEqual(['SELECT', 'INSERT']);
    expect(privileges.audit_verifier_progress).toEqual([]);
    for (const [table, granted] of Object.entries(privileges)) {
      if (table === 'audit_log' || table === 'audit_verifier_progress') continue;
      expect(granted, table).toEqual(['SELECT', 'INSERT', 'UPDATE', 'DELETE']);
    }
    expect(await failure(brokerUrl, "UPDATE public.audit_log SET actor = 'x'")).toBe(DENIED);
    expect(await failure(brokerUrl, 'DELETE FROM public.audit_log')).toBe(DENIED);
  });

  it('mesh_verifier: reads audit_log, upserts its own progress, and can INSERT, UPDATE or DELETE nothing else', async () => {
    const privileges = await tablePrivileges(verifierUrl);
    for (const [table, granted] of Object.entries(privileges)) {
      const expected =
        table === 'audit_log'
          ? ['SELECT']
          : table === 'audit_verifier_progress'
            ? ['SELECT', 'INSERT', 'UPDATE']
            : [];
      expect(granted, table).toEqual(expected);
    }
    expect(await failure(verifierUrl, "INSERT INTO public.meshes (name) VALUES ('x')")).toBe(DENIED);
    expect(await failure(verifierUrl, "UPDATE public.audit_log SET actor = 'x'")).toBe(DENIED);
    expect(await failure(verifierUrl, 'DELETE FROM public.audit_log')).toBe(DENIED);
    expect(await failure(verifierUrl, 'DELETE FROM public.audit_verifier_progress')).toBe(DENIED);
    expect(await failure(verifierUrl, 'SELECT body FROM public.messages LIMIT 1')).toBe(DENIED);
    expect(
      await failure(
        verifierUrl,
        'SELECT public.accept_messages(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1)',
      ),
    ).toBe(DENIED);
  });

  it('every function of public resolves names on a pinned search_path, and PUBLIC may execute none', async () => {
    const { rows } = await db.query<{ name: string; config: string[] | null; publicExecute: boolean }>(
      `SELECT p.proname AS name, p.proconfig AS config,
              EXISTS (SELECT FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                       WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE') AS "publicExecute"
         FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace ORDER BY 1`,
    );
    expect(rows.map((r) => r.name)).toEqual(
      expect.arrayContaining(['accept_messages', 'audit_log_refuse_change']),
    );
    for (const row of rows) {
      expect(row.config, row.name).toContain('search_path=pg_catalog, public, pg_temp');
      expect(row.publicExecute, row.name).toBe(false);
    }
  });
});

describe('a shadow audit_log first on the search_path', () => {
  const forgedMesh = randomUUID();
  let meshId: string;

  beforeAll(async () => {
    // What a role with CREATE somewhere, or a server's default search_path, could set up: a table of the
    // same name and shape in a schema searched before public, open to both roles, holding a forged chain.
    await db.query(`CREATE SCHEMA shadow;
      CREATE TABLE shadow.audit_log (LIKE public.audit_log INCLUDING ALL);
      GRANT USAGE ON SCHEMA shadow TO ${BROKER_ROLE}, ${VERIFIER_ROLE};
      GRANT ALL ON ALL TABLES IN SCHEMA shadow TO ${BROKER_ROLE}, ${VERIFIER_ROLE};
      GRANT ALL ON ALL SEQUENCES IN SCHEMA shadow TO ${BROKER_ROLE}, ${VERIFIER_ROLE};`);
    await db.query(
      `INSERT INTO shadow.audit_log (mesh_id, seq, prev_hash, hash, event_type, actor, payload, created_at)
       VALUES ($1, 1, 'forged', 'forged', 'message.sent', 'mallory', '{}', now())`,
      [forgedMesh],
    );
    const name = new URL(db.url).pathname.slice(1);
    await db.query(`ALTER DATABASE ${name} SET search_path = shadow, public`);
    // The setting applies to the sessions that start from now on: one as each role sees it.
    const seen = await as(brokerUrl, (client) => client.query('SHOW search_path'));
    expect(seen.rows[0].search_path).toBe('shadow, public');
  });

  it("captures none of a broker's appends: a node as mesh_broker sends a DM end to end, audited in public.audit_log", async () => {
    const node = await startNode({ kind: 'in-process', databaseUrl: brokerUrl });
    nodes.push(node);
    const mesh = await createMesh(node, 2);
    meshId = mesh.meshId;
    const [alice, bob] = mesh.members;
    const a = await connectPeer(node.wsUrl, mesh, alice!);
    const b = await connectPeer(node.wsUrl, mesh, bob!);
    const got = b.next('message');
    await a.send(bob!.pubkey, `as ${BROKER_ROLE}`);
    expect((await got).body).toBe(`as ${BROKER_ROLE}`);
    await waitFor(
      async () =>
        (await db.query('SELECT 1 FROM public.audit_log WHERE mesh_id = $1', [meshId])).rowCount! > 0,
      { what: 'the DM audited in public.audit_log' },
    );
    const shadowed = await db.query('SELECT mesh_id FROM shadow.audit_log');
    expect(shadowed.rows).toEqual([{ mesh_id: forgedMesh }]);
  });

  it("captures none of the verifier's reads: `audit verify` as mesh_verifier walks public.audit_log", async () => {
    const real = await db.query('SELECT count(*)::int AS n FROM public.audit_log WHERE mesh_id = $1', [
      meshId,
    ]);
    const result = await runWorkbench(['audit', 'verify', '--json', '--database-url', verifierUrl]);
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0);
    const report = JSON.parse(result.stdout) as {
      valid: boolean;
      meshes: Array<{ meshId: string; entries: number }>;
    };
    expect(report.valid).toBe(true);
    expect(report.meshes.map((m) => m.meshId)).not.toContain(forgedMesh);
    expect(report.meshes.find((m) => m.meshId === meshId)).toMatchObject({ entries: real.rows[0]!.n });
  });
});

describe('brokers run no DDL at start', () => {
  const name = `wb_test_db_roles_bare_${randomBytes(4).toString('hex')}`;
  const bareUrl = () => {
    const url = new URL(SERVER_URL);
    url.pathname = `/${name}`;
    return url.toString();
  };
  beforeAll(() => as(SERVER_URL, (admin) => admin.query(`CREATE DATABASE ${name}`)));
  afterAll(() => as(SERVER_URL, (admin) => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)));

  it('a node refuses to start on a database that is not migrated, saying what to run, and creates nothing', async () => {
    await expect(startNode({ kind: 'in-process', databaseUrl: bareUrl() })).rejects.toThrow(
      /migrations are behind this release .*workbench migrate/,
    );
    const made = await as(bareUrl(), (client) =>
      client.query(
        "SELECT nspname FROM pg_namespace WHERE nspname IN ('drizzle') UNION ALL SELECT tablename FROM pg_tables WHERE schemaname = 'public'",
      ),
    );
    expect(made.rows).toEqual([]);
  });

  it('MIGRATE_ON_START=1 (the dev convenience) migrates it and serves', async () => {
    const node = await startNode({
      kind: 'in-process',
      databaseUrl: bareUrl(),
      env: { MIGRATE_ON_START: '1' },
    });
    try {
      expect((await fetch(`${node.url}/health`)).status).toBe(200);
    } finally {
      await node.stop();
    }
  });
});
