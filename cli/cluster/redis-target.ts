/**
 * The Redis a local cluster's nodes use, for what publishes to them (the console's flag flip, the
 * promotion's push): its single Redis (`redisUrl`), or the Redis Cluster it was started on
 * (`REDIS_CLUSTER_NODES` when `workbench up` ran, recorded in cluster.json's `brokerEnv`), where the nodes
 * listen on sharded channels that a single-Redis publish never reaches. Kept apart from local.ts so a
 * command that only pushes does not load the cluster's process code.
 */
import type { RedisTarget } from '../../broker/redis/clients.js';
import { parseRedisClusterNodes } from '../../broker/redis/cluster-nodes.js';

export function localClusterRedis(cluster: {
  redisUrl: string;
  brokerEnv?: Record<string, string> | undefined;
}): RedisTarget {
  const nodes = cluster.brokerEnv?.REDIS_CLUSTER_NODES;
  if (nodes === undefined) return { url: cluster.redisUrl };
  try {
    return { url: cluster.redisUrl, clusterNodes: parseRedisClusterNodes(nodes) };
  } catch (error) {
    throw new Error(`.workbench/cluster.json: brokerEnv.REDIS_CLUSTER_NODES: ${(error as Error).message}`);
  }
}
