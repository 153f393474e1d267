/**
 * `REDIS_CLUSTER_NODES`: the seed nodes of a Redis Cluster, `host:port,host:port,…` (docs/redis-cluster.md).
 * Read by the broker's config and by the CLI's "refresh now" push, so both accept and refuse the same text.
 */

import { REDACTED } from '../secrets/redact.js';

export interface RedisClusterNode {
  host: string;
  port: number;
}

/** The nodes named in `text`, or an error that says which entry is wrong and why. */
export function parseRedisClusterNodes(text: string): RedisClusterNode[] {
  const entries = text.split(',').map((entry) => entry.trim());
  if (entries.every((entry) => entry === ''))
    throw new Error('lists no node; expected host:port[,host:port…]');
  return entries.map((entry, index) => {
    if (entry === '') throw new Error(`entry ${index + 1} is empty (a stray ","?)`);
    // The last ":" separates the port, so a bracketed IPv6 address ([::1]:7000) works too.
    const colon = entry.lastIndexOf(':');
    const host = colon > 0 ? entry.slice(0, colon).replace(/^\[(.*)\]$/, '$1') : '';
    const port = colon > 0 ? entry.slice(colon + 1) : '';
    if (host === '' || !/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)
      throw new Error(
        `${entry.includes('@') ? REDACTED : `"${entry}"`} is not host:port (a port from 1 to 65535)`,
      );
    // An entry with credentials in it (user:pw@host) is not echoed: the password would be printed.
    const shown = entry.includes('@') ? REDACTED : `"${entry}"`;
    if (/[\s/@]/.test(host)) throw new Error(`${shown} has no valid host (give host:port, not a URL)`);
    return { host, port: Number(port) };
  });
}
