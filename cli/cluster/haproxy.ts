/**
 * HAProxy configuration equivalent to a phase's Traefik file (see traefik.ts for the subset):
 * - each router becomes an ACL on the path prefix, in Traefik's order, routing to a backend;
 * - a load balancer becomes a least-connections backend (round-robin among equals) with an HTTP health check (`GET <path>` of the file,
 *   expecting 200; a connection refused on live traffic also marks the server down at once, and a server
 *   that is down is checked four times as often, so one that becomes healthy gets traffic within about half
 *   an interval) and, when sticky, an inserted cookie (HttpOnly, SameSite) that pins a client to its
 *   server; a cookie naming a server that is down is ignored and the client re-pinned (`option redispatch`);
 * - a failover becomes one backend with the primary's servers and the fallback's as `backup` (used only
 *   while every primary server fails its check);
 * - a weighted service becomes one backend with every member's servers, weighted.
 * One backend has one health check and one cookie: the members of a failover or weighted service must
 * agree on them (phase 1's primary and standby both check `/health/active`), else it is an error naming
 * them, never one member's check silently applied to the others.
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

type LoadBalancer = Extract<Service, { kind: 'loadBalancer' }>;

/** The load balancers a service is made of: itself, or its members' (failover, weighted), in order. */
function loadBalancersOf(config: TraefikConfig, name: string): Array<[string, LoadBalancer]> {
  const service = config.services[name]!;
  if (service.kind === 'loadBalancer') return [[name, service]];
  const members =
    service.kind === 'failover' ? [service.service, service.fallback] : service.services.map((s) => s.name);
  return members.flatMap((member) => loadBalancersOf(config, member));
}

function describeCheck(service: LoadBalancer): string {
  const check = service.healthCheck;
  return check ? `GET ${check.path} every ${check.intervalMs} ms` : 'no health check';
}

/**
 * The load balancer settings of a service: its own, or the ones all its load balancers share (failover,
 * weighted), since HAProxy runs them as one backend with one health check and one cookie.
 */
function settingsOf(config: TraefikConfig, name: string): LoadBalancer {
  const [[firstName, first], ...others] = loadBalancersOf(config, name) as [
    [string, LoadBalancer],
    ...Array<[string, LoadBalancer]>,
  ];
  for (const [otherName, other] of others) {
    if (JSON.stringify(other.healthCheck) !== JSON.stringify(first.healthCheck))
      throw new Error(
        `http.services.${name}: ${firstName} (${describeCheck(first)}) and ${otherName} (${describeCheck(other)}) become one HAProxy backend and must have the same health check`,
      );
    if (JSON.stringify(other.sticky) !== JSON.stringify(first.sticky))
      throw new Error(
        `http.services.${name}: ${firstName} and ${otherName} become one HAProxy backend and must have the same sticky cookie`,
      );
  }
  return first;
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
    const settings = settingsOf(config, name);
    // Least connections, not round-robin: a peer's WebSocket lives for hours, so round-robin keeps a
    // restarted node nearly empty (only new connections are spread) and the next node drained holds
    // everyone it took over (issue 26 item 5: 4,525 of 5,000 sessions on the roll's last node). With equal
    // loads (short HTTP requests) HAProxy round-robins among the least loaded servers.
    lines.push(`backend svc_${name}`, '  balance leastconn');
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
      // A server that is down is checked four times as often: one that passes again (a phase-1 standby
      // that took the active lease) gets traffic within about half an interval, not two.
      const { intervalMs } = settings.healthCheck;
      lines.push(
        `  default-server inter ${intervalMs}ms downinter ${Math.max(100, Math.round(intervalMs / 4))}ms fall 2 rise 2 observe layer4 error-limit 1 on-error mark-down`,
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
