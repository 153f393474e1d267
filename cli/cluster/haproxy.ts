/**
 * HAProxy configuration equivalent to a phase's Traefik file (see traefik.ts for the subset):
 * - each router becomes an ACL on the path prefix, in Traefik's order, routing to a backend;
 * - a load balancer becomes a round-robin backend with an HTTP health check (`GET <path>`, expecting 200;
 *   a connection refused on live traffic also marks the server down at once) and, when sticky, an inserted cookie (HttpOnly, SameSite) that pins a client to its server; a cookie
 *   naming a server that is down is ignored and the client re-pinned (`option redispatch`);
 * - a failover becomes one backend with the primary's servers and the fallback's as `backup`;
 * - a weighted service becomes one backend with every member's servers, weighted.
 * Server URLs name brokers (`http://broker-2:8080`); `addresses` maps each host to where it runs here.
 */
import type { Service, TraefikConfig } from './traefik.js';

export interface HaproxyOptions {
  bind: string;
  /** broker host name → "127.0.0.1:port" */
  addresses: Record<string, string>;
  pidFile?: string;
}

interface BackendServer {
  name: string;
  address: string;
  backup: boolean;
  weight: number;
}

function host(url: string): string {
  return new URL(url).hostname;
}

function serversOf(
  config: TraefikConfig,
  name: string,
  options: HaproxyOptions,
  weight = 1,
): BackendServer[] {
  const service = config.services[name]!;
  if (service.kind === 'loadBalancer') {
    return service.servers.map((url) => {
      const name = host(url);
      const address = options.addresses[name];
      if (!address) throw new Error(`no local address for ${name}`);
      return { name, address, backup: false, weight };
    });
  }
  if (service.kind === 'failover') {
    return [
      ...serversOf(config, service.service, options),
      ...serversOf(config, service.fallback, options).map((s) => ({ ...s, backup: true })),
    ];
  }
  return service.services.flatMap((member) => serversOf(config, member.name, options, member.weight));
}

/** The load balancer settings of a service: its own, or those of its first member (failover, weighted). */
function settingsOf(config: TraefikConfig, service: Service): Extract<Service, { kind: 'loadBalancer' }> {
  if (service.kind === 'loadBalancer') return service;
  const first = service.kind === 'failover' ? service.service : service.services[0]!.name;
  return settingsOf(config, config.services[first]!);
}

export function haproxyConfig(config: TraefikConfig, options: HaproxyOptions): string {
  const lines = [
    '# Generated from the phase Traefik file by `workbench up`; edit the Traefik file, not this.',
    'global',
    ...(options.pidFile ? [`  pidfile ${options.pidFile}`] : []),
    'defaults',
    '  mode http',
    '  timeout connect 2s',
    '  timeout client 60s',
    '  timeout server 60s',
    '  timeout tunnel 1h',
    '  option redispatch',
    '  retries 2',
    'frontend mesh',
    `  bind ${options.bind}`,
  ];
  const used = new Set<string>();
  for (const router of config.routers) {
    lines.push(`  acl route_${router.name} path_beg ${router.pathPrefix}`);
    lines.push(`  use_backend svc_${router.service} if route_${router.name}`);
    used.add(router.service);
  }
  for (const name of used) {
    const service = config.services[name]!;
    const settings = settingsOf(config, service);
    lines.push(`backend svc_${name}`, '  balance roundrobin');
    if (settings.sticky) {
      const attributes = [
        settings.sticky.httpOnly ? ' httponly' : '',
        settings.sticky.sameSite
          ? ` attr "SameSite=${settings.sticky.sameSite[0]!.toUpperCase()}${settings.sticky.sameSite.slice(1)}"`
          : '',
      ].join('');
      lines.push(`  cookie ${settings.sticky.name} insert indirect nocache${attributes}`);
    }
    if (settings.healthCheck) {
      lines.push(`  option httpchk GET ${settings.healthCheck.path}`, '  http-check expect status 200');
      // Besides the periodic check, a refused connection on live traffic marks the server down at once,
      // so a killed node stops receiving peers before its next check (failover in well under a second).
      lines.push(
        `  default-server inter ${settings.healthCheck.intervalMs}ms fall 2 rise 2 observe layer4 error-limit 1 on-error mark-down`,
      );
      lines.push(`  timeout check ${settings.healthCheck.timeoutMs}ms`);
    }
    for (const server of serversOf(config, name, options)) {
      const parts = [`  server ${server.name} ${server.address}`];
      if (settings.healthCheck) parts.push('check');
      if (settings.sticky) parts.push(`cookie ${server.name}`);
      if (server.weight !== 1) parts.push(`weight ${server.weight}`);
      if (server.backup) parts.push('backup');
      lines.push(parts.join(' '));
    }
  }
  return `${lines.join('\n')}\n`;
}
