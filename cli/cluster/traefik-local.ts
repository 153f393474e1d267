/**
 * Traefik as the local cluster's load balancer, used instead of HAProxy when a `traefik` binary is on PATH
 * (or `up --lb traefik`). Unlike HAProxy it needs no translation: it runs the phase's own dynamic file, with
 * each broker host (`broker-1:8080` in the compose network) replaced by the local node's address, under a
 * static configuration shaped like `traefik/traefik.yml` but bound to loopback.
 */
import { spawnSync } from 'node:child_process';
import { parse, stringify } from 'yaml';

/** True when a `traefik` binary answers `traefik version`. */
export function traefikInstalled(): boolean {
  const result = spawnSync('traefik', ['version'], { stdio: 'ignore' });
  return !result.error && result.status === 0;
}

/** Which load balancer `up` runs: the one asked for, else Traefik when installed, else HAProxy. */
export function chooseLoadBalancer(asked: 'haproxy' | 'traefik' | undefined): 'haproxy' | 'traefik' {
  if (asked === 'traefik' && !traefikInstalled())
    throw new Error(
      '--lb traefik: no traefik binary on PATH (https://doc.traefik.io/traefik/getting-started/install-traefik/)',
    );
  return asked ?? (traefikInstalled() ? 'traefik' : 'haproxy');
}

/**
 * The phase's dynamic file with every server URL pointed at the local node of the same host name
 * (`addresses`: host name → `127.0.0.1:port`). A server whose host has no local node is an error.
 */
export function localDynamicConfig(phaseFile: string, addresses: Record<string, string>): string {
  const document = parse(phaseFile) as {
    http?: { services?: Record<string, { loadBalancer?: { servers?: Array<{ url: string }> } }> };
  };
  for (const [name, service] of Object.entries(document.http?.services ?? {})) {
    for (const server of service.loadBalancer?.servers ?? []) {
      const url = new URL(server.url);
      const address = addresses[url.hostname];
      if (!address) throw new Error(`http.services.${name}: no local node for ${url.hostname}`);
      server.url = `${url.protocol}//${address}${url.pathname === '/' ? '' : url.pathname}`;
    }
  }
  return stringify(document);
}

/** The static configuration of a local Traefik: one loopback entry point, the dynamic file, a ping. */
export function localStaticConfig(options: { bind: string; dynamicFile: string }): string {
  return stringify({
    entryPoints: {
      web: { address: options.bind, transport: { respondingTimeouts: { idleTimeout: '3600s' } } },
    },
    providers: { file: { filename: options.dynamicFile, watch: false } },
    // On the loopback entry point: left to its default, ping would open Traefik's own entry point on
    // :8080 on every interface.
    ping: { entryPoint: 'web' },
    log: { level: 'INFO' },
  });
}
