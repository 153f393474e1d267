import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { runMigrations } from '../../broker/db/migrate.js';

/** The machine's Postgres (never stopped or reconfigured by tests). */
export const SERVER_URL = process.env.TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  url: string;
  /** A client for assertions straight against the tables. */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
  drop(): Promise<void>;
}

function withDatabase(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** A fresh, migrated database for one test file; `drop` removes it (and its connections). */
export async function createTestDatabase(label: string, serverUrl = SERVER_URL): Promise<TestDatabase> {
  const name = `wb_test_${label.replace(/\W/g, '_').toLowerCase()}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = withDatabase(serverUrl, name);
  await runMigrations(url);
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {}); // DROP … WITH (FORCE) ends connections that are still closing
  return {
    url,
    query: (text, values) => pool.query(text, values),
    async drop() {
      await pool.end();
      const client = new pg.Client({ connectionString: serverUrl });
      await client.connect();
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await client.end();
    },
  };
}
