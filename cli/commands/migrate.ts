import { ensureDatabase, runMigrations } from '../../broker/db/migrate.js';
import { parse } from '../args.js';
import { databaseUrlFor } from '../database.js';

export async function migrateCommand(argv: string[]): Promise<number> {
  const { values } = parse(argv, { 'database-url': { type: 'string' } });
  const databaseUrl = databaseUrlFor(values['database-url']);
  await ensureDatabase(databaseUrl);
  await runMigrations(databaseUrl);
  console.log(`migrations applied to ${new URL(databaseUrl).pathname.slice(1)}`);
  return 0;
}
