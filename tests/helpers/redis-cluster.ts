/** The throw-away Redis Cluster lives with the local cluster's code, where the fan-out benchmark uses it too. */
export { type ClusterNodeInfo, ThrowawayRedisCluster } from '../../cli/cluster/redis-cluster.js';
