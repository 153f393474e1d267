/**
 * The Redis ACL user of a cluster's brokers (docs/design.md § Redis access): on, with a password, limited to
 * the keys and channels under the cluster's prefix, every command but the administrative and dangerous ones
 * (CONFIG, FLUSHALL, KEYS, DEBUG, SHUTDOWN, ACL, …) and for INFO, which ioredis's ready check sends. What the
 * brokers run is within it: key commands and Lua scripts on prefixed keys, PUBLISH/SUBSCRIBE and the sharded
 * SPUBLISH/SSUBSCRIBE on prefixed channels, a cluster's slot map (CLUSTER SLOTS).
 */
import { randomBytes } from 'node:crypto';

/** Redis user names and prefixes written into an ACL rule: no space, no glob character. */
const SAFE = /^[A-Za-z0-9:._-]{1,100}$/;

/** A password fit for an ACL rule and a URL (hex: no character to escape). */
export function newRedisPassword(): string {
  return randomBytes(24).toString('hex');
}

/** The redis.conf / ACL file line of the brokers' user. */
export function brokerAclUser(user: string, password: string, prefix: string): string {
  if (!SAFE.test(user)) throw new Error(`not a Redis user name fit for an ACL rule: "${user}"`);
  if (!SAFE.test(prefix)) throw new Error(`not a key prefix fit for an ACL rule: "${prefix}"`);
  if (!/^[0-9a-f]{16,}$/.test(password)) throw new Error('the ACL password must be 16 or more hex digits');
  return `user ${user} on >${password} resetkeys resetchannels ~${prefix}* &${prefix}* +@all -@admin -@dangerous +info`;
}
