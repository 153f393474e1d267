/**
 * How a node reports its Redis connections' errors. Most (refused, reset, timed out) clear up by waiting
 * and are logged at debug, as the reconnects retry them. A refused certificate or credentials do not: the
 * first of each is logged at warn with what to check, so a node on the wrong CA or password says why
 * (and `/health` shows Redis down) instead of only "Connection is closed".
 */
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

/** Logs `client`'s errors: debug for each, warn once per distinct lasting cause. */
export function logRedisErrors(client: RedisClient, log: Logger, what: string): void {
  let warned: string | undefined;
  client.on('error', (error: Error & { code?: string }) => {
    const hint = redisErrorHint(error);
    if (hint !== undefined && warned !== `${hint}${error.message}`) {
      warned = `${hint}${error.message}`;
      log.warn({ err: error, redis: what }, `${what}: ${hint}`);
    } else log.debug({ err: error }, `${what} error`);
  });
}
