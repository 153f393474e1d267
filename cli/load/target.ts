/**
 * Where `workbench load` points its peers and its admin calls: `--url` (one URL, e.g. the load balancer),
 * `--nodes` (a comma-separated list; peer i starts on node i mod K and falls back to the others), or, with
 * neither, the local cluster started here (`.workbench/cluster.json`: its load balancer). The admin token:
 * --admin-token, else ADMIN_TOKEN, else the local cluster's.
 */

import { UsageError } from '../args.js';
import { readCluster } from '../cluster/local.js';

export interface LoadTarget {
  /** WebSocket URLs (`ws://host:port/ws`), one per node or just the load balancer. */
  wsUrls: string[];
  /** Base URL of the admin API (`http://host:port`). */
  adminUrl: string;
  adminToken: string;
}

/** `http://h:p`, `ws://h:p` or `ws://h:p/ws` → the WebSocket and HTTP forms of the same server. */
export function normalizeUrl(raw: string): { ws: string; http: string } {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError(`"${raw}" is not a URL (expected http://host:port or ws://host:port/ws)`);
  }
  if (!['http:', 'https:', 'ws:', 'wss:'].includes(url.protocol))
    throw new UsageError(`"${raw}": expected an http(s):// or ws(s):// URL`);
  const secure = url.protocol === 'https:' || url.protocol === 'wss:';
  const base = `${url.host}${url.pathname.replace(/\/ws\/?$/, '').replace(/\/$/, '')}`;
  return { ws: `${secure ? 'wss' : 'ws'}://${base}/ws`, http: `${secure ? 'https' : 'http'}://${base}` };
}

export function resolveTarget(options: {
  url?: string;
  nodes?: string;
  adminUrl?: string;
  adminToken?: string;
}): LoadTarget {
  if (options.url !== undefined && options.nodes !== undefined)
    throw new UsageError('give either --url or --nodes, not both');
  let urls: Array<{ ws: string; http: string }>;
  const cluster = readCluster();
  // Whichever nodes are targeted (the local cluster's own, named with --nodes, too), as the help says. An
  // empty ADMIN_TOKEN counts as unset (as DATABASE_URL's does), so the local cluster's token still applies.
  const token = options.adminToken ?? (process.env.ADMIN_TOKEN || cluster?.adminToken);
  if (options.url !== undefined) urls = [normalizeUrl(options.url)];
  else if (options.nodes !== undefined) {
    const list = options.nodes.split(',').filter((s) => s.trim() !== '');
    if (list.length === 0) throw new UsageError('--nodes needs at least one URL');
    urls = list.map((u) => normalizeUrl(u.trim()));
  } else {
    if (!cluster)
      throw new UsageError(
        'no target: give --url or --nodes, or run it where `workbench up` started a cluster',
      );
    urls = [normalizeUrl(cluster.lb.url)];
  }
  if (!token) throw new UsageError('no admin token: give --admin-token or set ADMIN_TOKEN');
  const adminUrl = options.adminUrl !== undefined ? normalizeUrl(options.adminUrl).http : urls[0]!.http;
  return { wsUrls: urls.map((u) => u.ws), adminUrl, adminToken: token };
}
