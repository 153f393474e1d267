import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/meshbroker';
export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

interface ClusterFile {
  databaseUrl?: string;
  redisUrl?: string;
  /** Phase 4's simulation: each region has a Redis of its own (cli/cluster/local.ts RegionsState). */
  regions?: { list: Array<{ redis: { url: string } }> };
  redisKeyPrefix?: string;
  flagsDir?: string;
  /** REDIS_CLUSTER_NODES there when the cluster was started on a Redis Cluster. */
  brokerEnv?: Record<string, string>;
}

/** The running local cluster's settings (.workbench/cluster.json), if there is one. */
function clusterFile(): ClusterFile {
  const path = join(process.cwd(), '.workbench', 'cluster.json');
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as ClusterFile) : {};
}

/**
 * The database a CLI command works on: --database-url, else DATABASE_URL, else the running local
 * cluster's (.workbench/cluster.json), else the default.
 */
export function databaseUrlFor(option: string | undefined): string {
  return option || process.env.DATABASE_URL || clusterFile().databaseUrl || DEFAULT_DATABASE_URL;
}

/** The Redis a CLI command pushes to, found the same way as the database. */
export function redisFor(option: string | undefined): { url: string; keyPrefix: string } {
  const cluster = clusterFile();
  return {
    url: option || process.env.REDIS_URL || cluster.redisUrl || DEFAULT_REDIS_URL,
    keyPrefix: process.env.REDIS_KEY_PREFIX || cluster.redisKeyPrefix || 'mesh:',
  };
}

/**
 * The Redis Cluster a push goes to (REDIS_CLUSTER_NODES's text, unparsed): the variable, else, unless
 * --redis-url or REDIS_URL names a single Redis, the local cluster's when it was started on one.
 */
export function redisClusterNodesFor(option: string | undefined): string | undefined {
  if (process.env.REDIS_CLUSTER_NODES !== undefined) return process.env.REDIS_CLUSTER_NODES;
  if (option || process.env.REDIS_URL) return undefined;
  return clusterFile().brokerEnv?.REDIS_CLUSTER_NODES;
}

/**
 * The Redis servers a "refresh now" push must reach: the one `redisFor` finds, and, when that is the
 * local two-region simulation's (no option, no REDIS_URL), every region's own Redis, since each region's
 * nodes subscribe to their own only (docs/multi-region.md § The bus across regions).
 */
export function pushRedisUrlsFor(option: string | undefined): string[] {
  const { url } = redisFor(option);
  if (option || process.env.REDIS_URL) return [url];
  const regions = clusterFile().regions?.list.map((r) => r.redis.url) ?? [];
  return [...new Set([url, ...regions])];
}

/** The flags folder of the running local cluster (its copy of the phase preset), if any. */
export function clusterFlagsDir(): string | undefined {
  return clusterFile().flagsDir;
}
