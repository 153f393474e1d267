import { ensureDatabase, runMigrations } from '../../broker/db/migrate.js';
import { defineCommand, type OptionSpec, type Parsed } from '../args.js';
import { databaseUrlFor } from '../database.js';

const OPTIONS = {
  'database-url': {
    type: 'string',
    value: 'URL',
    help: "the database (default: DATABASE_URL, the local cluster's)",
  },
} as const satisfies OptionSpec;

export const migrateCommand = defineCommand({
  synopsis: ['migrate [--database-url URL]'],
  about: `Creates the database if needed and applies the migrations (again: harmless).`,
  options: OPTIONS,
  run: runMigrateCommand,
});

async function runMigrateCommand({ values }: Parsed<typeof OPTIONS>): Promise<number> {
  const databaseUrl = databaseUrlFor(values['database-url']);
  await ensureDatabase(databaseUrl);
  await runMigrations(databaseUrl);
  console.log(`migrations applied to ${new URL(databaseUrl).pathname.slice(1)}`);
  return 0;
}
