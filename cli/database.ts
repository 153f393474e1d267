import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/meshbroker';

/**
 * The database a CLI command works on: --database-url, else DATABASE_URL, else the running local
 * cluster's (.workbench/cluster.json), else the default.
 */
export function databaseUrlFor(option: string | undefined): string {
  if (option) return option;
  if (process.env.DATABASE_URL) return process.env.DATABASE_URL;
  const clusterFile = join(process.cwd(), '.workbench', 'cluster.json');
  if (existsSync(clusterFile)) {
    const cluster = JSON.parse(readFileSync(clusterFile, 'utf8')) as { databaseUrl?: string };
    if (cluster.databaseUrl) return cluster.databaseUrl;
  }
  return DEFAULT_DATABASE_URL;
}
