/**
 * How a node reports its Redis connections' errors. Most (refused, reset, timed out) clear up by waiting
 * and are logged at debug, as the reconnects retry them. A refused certificate or credentials do not: the
 * first of each is logged at warn with what to check, so a node on the wrong CA or password says why
 * (and `/health` shows Redis down) instead of only "Connection is closed". A Redis Cluster client reports
 * only "None of startup nodes is available" as its own error; each node's refusal (WRONGPASS, a certificate)
 * comes as a node error, which is where the cause is.
 */
import { Cluster, Redis } from 'ioredis';
import type { Logger } from '../log.js';
import type { RedisClient } from './clients.js';

/** What to check for an error that waiting will not fix; undefined for the others. */
export function redisErrorHint(error: Error & { code?: string }): string | undefined {
  const code = error.code ?? '';
  if (/CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ERR_TLS|ERR_SSL/.test(code) || /certificate/i.test(error.message))
    return 'the Redis server certificate is not trusted (check REDIS_TLS_CA_FILE and the server name)';
  if (/^WRONGPASS|^NOAUTH/.test(error.message))
    return 'Redis refused the credentials (check the user and password in the URL, or REDIS_CLUSTER_PASSWORD)';
  if (/^NOPERM/.test(error.message))
    return "the Redis user lacks a permission (check its ACL: the node's key prefix and channels)";
  return undefined;
}

type RedisError = Error & { code?: string };
type Report = (error: RedisError, node?: string) => void;

/**
 * Logs `client`'s errors: debug for each, warn once per distinct lasting cause. On a cluster, its nodes'
 * errors too (ioredis names the event "node error" for the main connections and "nodeError" for the sharded
 * subscribers'), with the node's address.
 */
export function logRedisErrors(client: RedisClient, log: Logger, what: string): void {
  let warned: string | undefined;
  const report: Report = (error, node) => {
    const hint = redisErrorHint(error);
    const fields = { err: error, redis: what, ...(node === undefined ? {} : { redisNode: node }) };
    if (hint !== undefined && warned !== `${hint}${error.message}`) {
      warned = `${hint}${error.message}`;
      log.warn(fields, `${what}: ${hint}`);
    } else log.debug(fields, `${what} error`);
  };
  client.on('error', (error: RedisError) => report(error));
  if (client instanceof Cluster) watchClusterNodes(client, report);
}

/** A cluster's probe of a node runs at most this often. */
export const CLUSTER_PROBE_INTERVAL_MS = 30_000;

/**
 * Reports a cluster's node errors. ioredis reads the slot map on connections whose own errors it drops (a
 * refused certificate reaches the cluster as "Connection is closed."), so after a node error that names no
 * cause, at most every CLUSTER_PROBE_INTERVAL_MS, one plain connection to that node with the cluster's
 * options is made to learn the cause; it is closed at once, and reported only if it names a lasting one.
 */
function watchClusterNodes(client: Cluster, report: Report): void {
  let lastProbe = 0;
  const onNodeError = (error: RedisError, node: string) => {
    report(error, node);
    if (redisErrorHint(error) !== undefined || typeof node !== 'string') return;
    if (Date.now() - lastProbe < CLUSTER_PROBE_INTERVAL_MS) return;
    lastProbe = Date.now();
    void probeNode(client, node).then((cause) => {
      if (cause !== undefined && redisErrorHint(cause) !== undefined) report(cause, node);
    });
  };
  for (const event of ['node error', 'nodeError']) client.on(event, onNodeError);
}

/** The first error of one connection (and PING) to `node` ("host:port") with `client`'s options, if any. */
async function probeNode(client: Cluster, node: string): Promise<RedisError | undefined> {
  const colon = node.lastIndexOf(':');
  const probe = new Redis({
    ...client.options.redisOptions,
    host: node.slice(0, colon),
    port: Number(node.slice(colon + 1)),
    keyPrefix: undefined,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  let first: RedisError | undefined;
  probe.on('error', (error: RedisError) => {
    first ??= error;
  });
  try {
    await probe.connect();
    await probe.ping();
  } catch (error) {
    first ??= error as RedisError;
  } finally {
    probe.disconnect();
  }
  return first;
}
