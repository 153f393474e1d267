/**
 * Our side of a benchmark: broker processes sharing a fresh database, a redis-server of their own and one
 * flags environment, plus members made through the admin API (as `workbench load` does).
 */
import { createLoadMeshes, type LoadPeerPlan } from '../../cli/load/setup.js';
import type { FlagKey } from '../../flags/registry.js';
import {
  BENCH_ADMIN_TOKEN,
  type Broker,
  createDatabase,
  flagsFolder,
  startBroker,
  startRedis,
} from './processes.js';

export interface OurCluster {
  nodes: Broker[];
  /** The cluster's own fresh database (to look at its tables from a benchmark). */
  databaseUrl: string;
  /** The pid of the cluster's redis-server (its CPU time counts as the system's). */
  redisPid: number;
  /** Starts one more node with the same settings (a replacement after a kill). */
  start(id: string): Promise<Broker>;
  /** `peers` fresh members over `meshes` meshes, made through a live node's admin API. */
  members(peers: number, meshes?: number): Promise<LoadPeerPlan[]>;
}

export async function startOurCluster(
  label: string,
  flags: FlagKey[],
  count: number,
  extraEnv: Record<string, string> = {},
  /** Flags at "shadow" (docs/flags.md § Shadow). */
  shadow: FlagKey[] = [],
): Promise<OurCluster> {
  const redis = await startRedis();
  const databaseUrl = await createDatabase(label);
  const folder = flagsFolder(flags, shadow);
  const env = {
    DATABASE_URL: databaseUrl,
    REDIS_URL: redis.url,
    FLAGS_DIR: folder.dir,
    FLAGS_ENV: folder.env,
    ...extraEnv,
  };
  const nodes: Broker[] = [];
  const start = async (id: string) => {
    const node = await startBroker(id, env);
    nodes.push(node);
    return node;
  };
  for (let i = 1; i <= count; i++) await start(`${label}-${i}`);
  return {
    nodes,
    databaseUrl,
    redisPid: redis.child.pid,
    start,
    members: (peers, meshes = 1) => {
      const live = nodes.find((n) => n.process.exitCode === null && n.process.signalCode === null)!;
      return createLoadMeshes({ url: live.url, token: BENCH_ADMIN_TOKEN }, { peers, meshes });
    },
  };
}
