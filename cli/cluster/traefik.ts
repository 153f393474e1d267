/**
 * The subset of a Traefik v3 dynamic (file provider) configuration that the phases use: routers with a
 * PathPrefix rule and a priority; services that are a load balancer (servers, sticky cookie, health
 * check), a failover (service + fallback) or weighted (services with weights). Parsed into a small model
 * that the HAProxy generator turns into an equivalent configuration. Anything outside the subset is an
 * error naming it, never silently ignored.
 */
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

export interface StickyCookie {
  name: string;
  httpOnly: boolean;
  sameSite: string | undefined;
}

export interface HealthCheck {
  path: string;
  intervalMs: number;
  timeoutMs: number;
}

export type Service =
  | { kind: 'loadBalancer'; servers: string[]; sticky?: StickyCookie; healthCheck?: HealthCheck }
  | { kind: 'failover'; service: string; fallback: string }
  | { kind: 'weighted'; services: Array<{ name: string; weight: number }> };

export interface Router {
  name: string;
  pathPrefix: string;
  service: string;
  priority: number;
}

export interface TraefikConfig {
  routers: Router[];
  services: Record<string, Service>;
}

type Raw = Record<string, unknown>;

function object(value: unknown, where: string): Raw {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new Error(`${where}: expected an object`);
  return value as Raw;
}

/** "2s", "500ms", "1m" → milliseconds. */
export function durationMs(value: unknown, where: string): number {
  const match = /^(\d+)(ms|s|m)$/.exec(String(value));
  if (!match) throw new Error(`${where}: "${String(value)}" is not a duration like 2s or 500ms`);
  return Number(match[1]) * { ms: 1, s: 1000, m: 60_000 }[match[2] as 'ms' | 's' | 'm'];
}

/** The health check settings of the subset: what the probe asks for and how often. */
const HEALTH_CHECK_KEYS = ['path', 'interval', 'timeout'];

function parseService(name: string, raw: Raw): Service {
  const where = `http.services.${name}`;
  if (raw.loadBalancer) {
    const lb = object(raw.loadBalancer, `${where}.loadBalancer`);
    const servers = (lb.servers as Array<{ url?: unknown }> | undefined)?.map((server, i) => {
      if (typeof server?.url !== 'string')
        throw new Error(`${where}.loadBalancer.servers[${i}].url: required`);
      return server.url;
    });
    if (!servers?.length) throw new Error(`${where}.loadBalancer.servers: at least one server`);
    const service: Service = { kind: 'loadBalancer', servers };
    if (lb.sticky) {
      const cookie = object(
        object(lb.sticky, `${where}.loadBalancer.sticky`).cookie,
        `${where}.loadBalancer.sticky.cookie`,
      );
      service.sticky = {
        name: String(cookie.name ?? 'mesh_node'),
        httpOnly: cookie.httpOnly === true,
        sameSite: cookie.sameSite === undefined ? undefined : String(cookie.sameSite),
      };
    }
    if (lb.healthCheck) {
      const at = `${where}.loadBalancer.healthCheck`;
      const check = object(lb.healthCheck, at);
      // The path is what a server must answer 200 on (phase 1 checks /health/active, which only the holder
      // of the active lease passes): taken as written, never defaulted, and nothing else changes the probe.
      const other = Object.keys(check).find((key) => !HEALTH_CHECK_KEYS.includes(key));
      if (other !== undefined)
        throw new Error(`${at}.${other}: not supported (only ${HEALTH_CHECK_KEYS.join(', ')})`);
      if (typeof check.path !== 'string' || !check.path.startsWith('/'))
        throw new Error(`${at}.path: required, a path starting with /`);
      service.healthCheck = {
        path: check.path,
        intervalMs: durationMs(check.interval ?? '30s', `${at}.interval`),
        timeoutMs: durationMs(check.timeout ?? '5s', `${at}.timeout`),
      };
    }
    return service;
  }
  if (raw.failover) {
    const failover = object(raw.failover, `${where}.failover`);
    return { kind: 'failover', service: String(failover.service), fallback: String(failover.fallback) };
  }
  if (raw.weighted) {
    const weighted = object(raw.weighted, `${where}.weighted`);
    const services = (weighted.services as Array<{ name?: unknown; weight?: unknown }>).map((s) => ({
      name: String(s.name),
      weight: Number(s.weight ?? 1),
    }));
    return { kind: 'weighted', services };
  }
  throw new Error(`${where}: only loadBalancer, failover and weighted services are supported`);
}

export function parseTraefik(text: string): TraefikConfig {
  const http = object(object(parse(text), 'file').http, 'http');
  const routers = Object.entries(object(http.routers, 'http.routers')).map(([name, value]) => {
    const raw = object(value, `http.routers.${name}`);
    const rule = /^PathPrefix\(`([^`]*)`\)$/.exec(String(raw.rule ?? ''));
    if (!rule)
      throw new Error(
        `http.routers.${name}.rule: only PathPrefix(\`...\`) is supported, got ${String(raw.rule)}`,
      );
    // Without a priority, Traefik ranks a router by the length of its rule.
    const priority = raw.priority === undefined ? String(raw.rule).length : Number(raw.priority);
    return { name, pathPrefix: rule[1]!, service: String(raw.service), priority };
  });
  const services = Object.fromEntries(
    Object.entries(object(http.services, 'http.services')).map(([name, value]) => [
      name,
      parseService(name, object(value, `http.services.${name}`)),
    ]),
  );
  for (const router of routers) {
    if (!services[router.service])
      throw new Error(`http.routers.${router.name}.service: no service "${router.service}"`);
  }
  for (const [name, service] of Object.entries(services)) {
    const refs =
      service.kind === 'failover'
        ? [service.service, service.fallback]
        : service.kind === 'weighted'
          ? service.services.map((s) => s.name)
          : [];
    for (const ref of refs) if (!services[ref]) throw new Error(`http.services.${name}: no service "${ref}"`);
  }
  // Longest prefix first among equal priorities, as Traefik orders rules by length.
  routers.sort((a, b) => b.priority - a.priority || b.pathPrefix.length - a.pathPrefix.length);
  return { routers, services };
}

export function readTraefik(path: string): TraefikConfig {
  return parseTraefik(readFileSync(path, 'utf8'));
}
