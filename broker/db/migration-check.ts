/**
 * A node that does not migrate (MIGRATE_ON_START off, the default) checks instead that the database's
 * migrations are not behind its release, so that a broker newer than its database stops at start with what
 * to do, rather than failing on its first statement against a missing table or column. Read only: the
 * brokers' role may read the migrator's bookkeeping table (migration 0014) and nothing else of it.
 */
import { readMigrationFiles } from 'drizzle-orm/migrator';
import pg from 'pg';
import { migrationsFolder } from './migrate.js';

export class MigrationsBehind extends Error {}

/** Throws MigrationsBehind unless every migration of this release is applied to the database. */
export async function checkMigrationsApplied(databaseUrl: string): Promise<void> {
  const migrations = readMigrationFiles({ migrationsFolder: migrationsFolder() });
  const newest = Math.max(0, ...migrations.map((m) => m.folderMillis));
  const client = new pg.Client({
    connectionString: databaseUrl,
    application_name: 'mesh-broker-migration-check',
  });
  await client.connect();
  try {
    const applied = await client
      .query<{ newest: string | null }>(
        'SELECT max(created_at)::text AS newest FROM drizzle.__drizzle_migrations',
      )
      .then(
        (result) => Number(result.rows[0]?.newest ?? 0),
        (error: { code?: string }) => {
          // No bookkeeping table (never migrated) reads as nothing applied; anything else is not ours to hide.
          if (error.code === '42P01' || error.code === '3F000') return 0;
          throw error;
        },
      );
    if (applied < newest) {
      throw new MigrationsBehind(
        `the database's migrations are behind this release (${migrations.filter((m) => m.folderMillis > applied).length} not applied): ` +
          'run `workbench migrate` as the role that owns the schema (or set MIGRATE_ON_START=1, a dev convenience)',
      );
    }
  } finally {
    await client.end();
  }
}
