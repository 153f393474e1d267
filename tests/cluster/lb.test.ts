import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateMemberKeys, type MemberKeys } from '@mesh-broker/sdk';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { parse } from 'yaml';
import { packageRoot } from '../../broker/paths.js';
import { haproxyConfig } from '../../cli/cluster/haproxy.js';
import { alive, type ClusterFile } from '../../cli/cluster/local.js';
import { parseTraefik, readTraefik } from '../../cli/cluster/traefik.js';
import { CuttableLink } from '../../cli/proxies/cuttable-link.js';
import { phasePreset } from '../../flags/registry.js';
import { runWorkbench } from '../helpers/cli.js';
import { closeAllClients, connectPeer, type TestMesh } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { scrape, seriesValue } from '../helpers/verifier.js';
import { waitFor } from '../helpers/wait.js';

const root = packageRoot();
const PHASES = [0, 1, 2, 3, 4];

describe('phase folders', () => {
  it.each(PHASES)(
    'phase %i: the Traefik file parses and its HAProxy equivalent passes `haproxy -c`',
    (phase) => {
      const traefik = readTraefik(join(root, 'phases', `phase${phase}`, 'traefik.yml'));
      const addresses = Object.fromEntries([1, 2, 3, 4].map((i) => [`broker-${i}`, `127.0.0.1:${9000 + i}`]));
      const dir = mkdtempSync(join(tmpdir(), 'wb-haproxy-'));
      try {
        const cfg = join(dir, 'haproxy.cfg');
        writeFileSync(cfg, haproxyConfig(traefik, { bind: '127.0.0.1:18080', addresses }));
        const check = spawnSync('haproxy', ['-c', '-f', cfg], { encoding: 'utf8' });
        expect(check.status, check.stderr).toBe(0);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  it("phase 1: both servers are checked on the file's path, /health/active (only the lease holder passes)", () => {
    const traefik = readTraefik(join(root, 'phases', 'phase1', 'traefik.yml'));
    const addresses = { 'broker-1': '127.0.0.1:9001', 'broker-2': '127.0.0.1:9002' };
    const cfg = haproxyConfig(traefik, { bind: '127.0.0.1:18080', addresses });
    expect(cfg).toContain('option httpchk GET /health/active');
    expect(cfg).not.toMatch(/GET \/health$/m);
    expect(cfg).toMatch(/server broker-1 127\.0\.0\.1:9001 check cookie broker-1$/m);
    expect(cfg).toMatch(/server broker-2 127\.0\.0\.1:9002 check cookie broker-2 backup$/m);
  });

  it('a health check is taken as the file writes it: no default path, no unsupported key, no member silently checked like another', () => {
    const file = readFileSync(join(root, 'phases', 'phase1', 'traefik.yml'), 'utf8');
    const addresses = { 'broker-1': '127.0.0.1:9001', 'broker-2': '127.0.0.1:9002' };
    expect(() => parseTraefik(file.replace(/\n {10}path: \/health\/active/, ''))).toThrow(
      'http.services.primary.loadBalancer.healthCheck.path: required',
    );
    expect(() => parseTraefik(file.replace('interval: 1s', 'interval: 1s\n          port: 9999'))).toThrow(
      'http.services.primary.loadBalancer.healthCheck.port: not supported',
    );
    // The standby checked elsewhere than the primary: one HAProxy backend cannot do both, so it says so.
    const mixed = parseTraefik(file.replace(/(\n {4}standby:[\s\S]*?path: )\/health\/active/, '$1/health'));
    expect(() => haproxyConfig(mixed, { bind: '127.0.0.1:18080', addresses })).toThrow(
      'http.services.brokers: primary (GET /health/active every 1000 ms) and standby (GET /health every 1000 ms) become one HAProxy backend and must have the same health check',
    );
  });

  it.each(PHASES)('phase %i: the flag preset is the registry preset of the phase', (phase) => {
    const file = JSON.parse(
      readFileSync(join(root, 'phases', `phase${phase}`, 'flags', `phase${phase}.json`), 'utf8'),
    );
    expect(file.flags).toEqual(phasePreset(phase));
  });

  it.each(PHASES)(
    'phase %i: the compose override on the base file parses and its references hold',
    (phase) => {
      // phases/phaseN/compose.yml overrides deploy/compose/compose.yml (one project for every phase); paths
      // in both are relative to the base file's folder. tests/unit/compose-files.test.ts checks the merge
      // docker-compose itself makes; this is the shallow merge, enough for the references.
      const dir = join(root, 'phases', `phase${phase}`);
      const projectDir = join(root, 'deploy', 'compose');
      const read = (path: string) => parse(readFileSync(path, 'utf8'), { merge: true });
      const base = read(join(projectDir, 'compose.yml'));
      const override = read(join(dir, 'compose.yml'));
      // As Compose merges files: services by name, and the top-level named volumes of both (phase 4 adds its own).
      const merged = {
        ...base,
        services: { ...base.services },
        volumes: { ...(base.volumes ?? {}), ...(override.volumes ?? {}) },
      };
      for (const [name, service] of Object.entries(
        override.services as Record<string, { volumes?: string[] }>,
      ))
        merged.services[name] = {
          ...merged.services[name],
          ...service,
          volumes: [...(merged.services[name]?.volumes ?? []), ...(service.volumes ?? [])],
        };
      const compose = merged as {
        services: Record<
          string,
          {
            image?: string;
            depends_on?: Record<string, unknown> | string[];
            volumes?: string[];
            healthcheck?: unknown;
          }
        >;
        volumes?: Record<string, unknown>;
      };
      const services = Object.keys(compose.services);
      for (const required of [
        'postgres',
        'redis',
        'traefik',
        'prometheus',
        'grafana',
        'unleash',
        'client',
        'audit-verifier',
      ]) {
        expect(services).toContain(required);
      }
      const brokers = services.filter((s) => s.startsWith('broker-'));
      expect(brokers.length).toBeGreaterThan(0);
      for (const [name, service] of Object.entries(compose.services)) {
        expect(service.image, `${name} image`).toBeTruthy();
        const deps = Array.isArray(service.depends_on)
          ? service.depends_on
          : Object.keys(service.depends_on ?? {});
        for (const dep of deps) expect(services, `${name} depends on ${dep}`).toContain(dep);
        for (const volume of service.volumes ?? []) {
          // `${VAR:-default}` as Compose interpolates it when VAR is unset.
          const source = volume.replace(/\$\{\w+:-([^}]*)\}/g, '$1').split(':')[0]!;
          if (source.startsWith('.'))
            expect(() => readFileSync(join(projectDir, source)), `${name}: ${source}`).not.toThrow(/ENOENT/);
          else
            expect(Object.keys(compose.volumes ?? {}), `${name}: named volume ${source}`).toContain(source);
        }
        if (name.startsWith('broker-')) expect(service.healthcheck, `${name} health check`).toBeTruthy();
      }
      // The brokers the Traefik file routes to all exist in the compose file.
      const traefik = readTraefik(join(dir, 'traefik.yml'));
      for (const service of Object.values(traefik.services)) {
        if (service.kind === 'loadBalancer')
          for (const url of service.servers) expect(brokers).toContain(new URL(url).hostname);
      }
    },
  );
});

/** Reads a directory source too (readFileSync on a dir throws EISDIR, which still proves it exists). */

const clusters: Array<{ cwd: string; db: TestDatabase }> = [];

async function upPhase(phase: number, env: Record<string, string> = {}) {
  const db = await createTestDatabase(`lb_phase${phase}`);
  const cwd = mkdtempSync(join(tmpdir(), `wb-up-${phase}-`));
  clusters.push({ cwd, db });
  const result = await runWorkbench(
    ['up', '--phase', String(phase), '--port', '0', '--database-url', db.url],
    {
      HEARTBEAT_MS: '500',
      ...env,
    },
    cwd,
  );
  expect(result.code, result.stderr).toBe(0);
  const cluster = JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile;
  // `up` migrated as the URL's role; the brokers connect as the least-privilege one (docs/design.md § 9).
  const roles = await db.query(
    "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'mesh-broker:%'",
  );
  expect(roles.rows).toEqual([{ usename: 'mesh_broker' }]);
  return { cluster, cwd, db };
}

async function meshOn(cluster: ClusterFile, count: number): Promise<TestMesh> {
  const call = async (path: string, body: unknown) => {
    const response = await fetch(`${cluster.lb.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${cluster.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return (await response.json()) as Record<string, string>;
  };
  const { meshId } = await call('/admin/meshes', { name: `lb-${Date.now()}-${Math.random()}` });
  const members = Array.from({ length: count }, () => generateMemberKeys());
  for (const member of members) await call(`/admin/meshes/${meshId}/members`, { pubkey: member.pubkey });
  return { meshId: meshId!, members };
}

/** The response headers of a WebSocket upgrade through the load balancer. */
function upgradeHeaders(
  url: string,
  cookie?: string,
): Promise<Record<string, string | string[] | undefined>> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, cookie ? { headers: { cookie } } : {});
    socket.on('upgrade', (response) => {
      resolve(response.headers);
      socket.terminate();
    });
    socket.on('error', reject);
  });
}

const links: CuttableLink[] = [];
afterEach(async () => {
  closeAllClients();
  for (const link of links.splice(0)) await link.close();
});
afterAll(async () => {
  for (const { cwd, db } of clusters) {
    await runWorkbench(['down'], {}, cwd);
    rmSync(cwd, { recursive: true, force: true });
    await db.drop();
  }
});

describe('workbench up/down with HAProxy from the Traefik file', () => {
  it('phase 0: one broker; the WebSocket 101 sets the sticky cookie (HttpOnly, SameSite); down leaves nothing', async () => {
    const { cluster, cwd } = await upPhase(0);
    expect(cluster).toMatchObject({ phase: 0, nodes: [{ id: 'broker-1' }] });
    // Its Prometheus targets (file_sd), labelled as dashboards/prometheus.yml requires.
    const targets = join(cwd, '.workbench', 'prometheus', 'mesh-broker.yml');
    expect(parse(readFileSync(targets, 'utf8'))).toEqual([
      { targets: [new URL(cluster.nodes[0]!.url).host], labels: { environment: 'phase0', cluster: 'local' } },
    ]);
    const headers = await upgradeHeaders(`${cluster.lb.url.replace('http', 'ws')}/ws`);
    const cookie = String(headers['set-cookie']);
    expect(cookie).toMatch(/^mesh_node=broker-1;/);
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Lax');
    const again = await runWorkbench(['up', '--phase', '0', '--port', '0'], {}, cwd);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('a cluster is already running here');
    const stopped = await runWorkbench(['down'], {}, cwd);
    expect(stopped.stdout).toContain('stopped the phase 0 cluster');
    for (const pid of [cluster.lb.pid, ...cluster.nodes.map((n) => n.pid)]) expect(alive(pid)).toBe(false);
    expect(existsSync(targets)).toBe(false);
  });

  it('phase 2: HTTP round-robins over every node; /ws is sticky and a cookie naming a dead node is re-pinned', async () => {
    const { cluster } = await upPhase(2);
    const seen = new Set<string>();
    for (let i = 0; i < 9; i++)
      seen.add(((await (await fetch(`${cluster.lb.url}/health`)).json()) as { node: string }).node);
    expect([...seen].sort()).toEqual(['broker-1', 'broker-2', 'broker-3']);
    const ws = `${cluster.lb.url.replace('http', 'ws')}/ws`;
    const first = String((await upgradeHeaders(ws))['set-cookie']).split(';')[0]!;
    const pinned = first.split('=')[1]!;
    // With its cookie, a client comes back to the same node (no new cookie is set).
    expect((await upgradeHeaders(ws, first))['set-cookie']).toBeUndefined();
    const mesh = await meshOn(cluster, 1);
    const peer = await connectPeer(ws, mesh, mesh.members[0]!, { reconnect: false });
    expect(peer.node).toBeTruthy();
    // The pinned node dies: once HAProxy's check marks it down, the same cookie lands on another node.
    process.kill(cluster.nodes.find((n) => n.id === pinned)!.pid, 'SIGKILL');
    const repinned = await waitFor(
      async () => {
        const cookie = (await upgradeHeaders(ws, first).catch(() => ({}) as Record<string, undefined>))[
          'set-cookie'
        ];
        return cookie ? String(cookie) : undefined;
      },
      { timeoutMs: 10_000, what: 're-pinned cookie' },
    );
    expect(repinned).not.toContain(`mesh_node=${pinned};`);
  });

  it("phase 0: an SDK peer sends the load balancer's sticky cookie back on every reconnect", async () => {
    const { cluster } = await upPhase(0);
    const link = await CuttableLink.start(cluster.lb.url);
    links.push(link);
    const mesh = await meshOn(cluster, 1);
    const peer = await connectPeer(link.url('/ws'), mesh, mesh.members[0]!);
    for (let cut = 0; cut < 3; cut++) {
      const back = peer.next('welcome', () => true, 10_000);
      expect(link.cut()).toBeGreaterThan(0);
      expect((await back).node).toBe('broker-1');
    }
    // What went over the wire, not what the SDK says of itself: the first upgrade had no cookie to send,
    // each reconnect sent the one HAProxy set on it.
    expect(link.cookiesSent()).toEqual([
      undefined,
      'mesh_node=broker-1',
      'mesh_node=broker-1',
      'mesh_node=broker-1',
    ]);
  });

  it('phase 2: an SDK peer cut six times comes back to its node each time; after that node dies, to another, where it stays', async () => {
    const { cluster } = await upPhase(2);
    const link = await CuttableLink.start(cluster.lb.url);
    links.push(link);
    const mesh = await meshOn(cluster, 1);
    const peer = await connectPeer(link.url('/ws'), mesh, mesh.members[0]!);
    const reconnectsAfterCuts = async (cuts: number) => {
      const nodes: string[] = [];
      for (let cut = 0; cut < cuts; cut++) {
        const back = peer.next('welcome', () => true, 15_000);
        link.cut();
        nodes.push((await back).node);
      }
      return nodes;
    };
    const home = peer.node!;
    // On the old SDK (no cookie jar) this was a round-robin: broker-1, broker-2, broker-3, broker-1, …
    expect(await reconnectsAfterCuts(6)).toEqual(Array(6).fill(home));
    const moved = peer.next('welcome', (w) => w.node !== home, 15_000);
    process.kill(cluster.nodes.find((n) => n.id === home)!.pid, 'SIGKILL');
    const newHome = (await moved).node;
    expect(newHome).not.toBe(home);
    expect(await reconnectsAfterCuts(4)).toEqual(Array(4).fill(newHome));
  });

  it('phase 1: SIGKILL of the primary moves every peer to the standby within 3 s', async () => {
    const { cluster } = await upPhase(1, { ACTIVE_LEASE_TTL_MS: '1000' });
    const ws = `${cluster.lb.url.replace('http', 'ws')}/ws`;
    const mesh = await meshOn(cluster, 5);
    const peers = await Promise.all(
      mesh.members.map((m) => connectPeer(ws, mesh, m, { backoff: { initialMs: 50, maxMs: 300 } })),
    );
    expect(new Set(peers.map((p) => p.node))).toEqual(new Set(['broker-1']));
    const moved = Promise.all(peers.map((p) => p.next('welcome', (w) => w.node === 'broker-2', 10_000)));
    const killedAt = Date.now();
    process.kill(cluster.nodes[0]!.pid, 'SIGKILL');
    await moved;
    const elapsed = Date.now() - killedAt;
    console.log(
      `phase 1 failover: all 5 peers reconnected to the standby ${elapsed} ms after SIGKILL of the primary`,
    );
    expect(elapsed).toBeLessThan(3000);
  });

  it('phase 1: after a failover, a restarted primary gets no new peer while the standby holds the lease; DMs between old and new peers arrive', async () => {
    const { cluster, cwd } = await upPhase(1, { ACTIVE_LEASE_TTL_MS: '1000' });
    const ws = `${cluster.lb.url.replace('http', 'ws')}/ws`;
    const mesh = await meshOn(cluster, 3);
    const [memberA, memberB, memberC] = mesh.members as [MemberKeys, MemberKeys, MemberKeys];
    const backoff = { initialMs: 50, maxMs: 300 };
    const a = await connectPeer(ws, mesh, memberA, { backoff });
    const b = await connectPeer(ws, mesh, memberB, { backoff });
    expect([a.node, b.node]).toEqual(['broker-1', 'broker-1']);
    const moved = Promise.all([a, b].map((p) => p.next('welcome', (w) => w.node === 'broker-2', 10_000)));
    process.kill(cluster.nodes[0]!.pid, 'SIGKILL');
    await moved;
    const restarted = await runWorkbench(['node', 'start', 'broker-1'], {}, cwd);
    expect(restarted.code, restarted.stderr).toBe(0);
    // HAProxy takes a server back after `rise 2` passing checks: once the restarted primary has answered
    // three of them (its own count, mesh_broker_health_checks_total), it would have been taken back if it
    // passed; it answers `standby` while broker-2 holds the lease, and no new peer may go to it.
    const restartedUrl = cluster.nodes[0]!.url;
    await waitFor(
      async () => {
        const text = await scrape(restartedUrl).catch(() => '');
        const checks = ['ok', 'standby', 'unavailable', 'draining'].map(
          (status) => seriesValue(text, 'mesh_broker_health_checks_total', { route: 'active', status }) ?? 0,
        );
        return checks.reduce((a, b) => a + b) >= 3;
      },
      { timeoutMs: 10_000, what: "three of HAProxy's checks of the restarted primary" },
    );
    const c = await connectPeer(ws, mesh, memberC, { backoff });
    const toA = a.next('message', (m) => m.body === 'c to a', 3000);
    await c.send(memberA.pubkey, 'c to a');
    const toC = c.next('message', (m) => m.body === 'b to c', 3000);
    await b.send(memberC.pubkey, 'b to c');
    const arrived = await Promise.allSettled([toA, toC]);
    expect({ c: c.node, a: a.node, b: b.node, arrived: arrived.map((r) => r.status) }).toEqual({
      c: 'broker-2',
      a: 'broker-2',
      b: 'broker-2',
      arrived: ['fulfilled', 'fulfilled'],
    });
    // What the load balancer checks: only the holder of the active lease passes /health/active.
    const active = async (id: string) => {
      const response = await fetch(`${cluster.nodes.find((n) => n.id === id)!.url}/health/active`);
      const body = (await response.json()) as { status: string; activeLease: string };
      return { code: response.status, status: body.status, activeLease: body.activeLease };
    };
    expect(await active('broker-2')).toEqual({ code: 200, status: 'ok', activeLease: 'holder' });
    expect(await active('broker-1')).toEqual({ code: 503, status: 'standby', activeLease: 'standby' });
    expect((await fetch(`${cluster.nodes[0]!.url}/health`)).status).toBe(200);
  });

  it('phase 3: SIGTERM on a node drains it; its peers reconnect through the LB and lose nothing', async () => {
    const { cluster } = await upPhase(3, { SEND_BURST: '1000', SEND_RATE_PER_MIN: '100000' });
    const ws = `${cluster.lb.url.replace('http', 'ws')}/ws`;
    const mesh = await meshOn(cluster, 6);
    const sender = await connectPeer(ws, mesh, mesh.members[0]!);
    const recipients = await Promise.all(mesh.members.slice(1).map((m) => connectPeer(ws, mesh, m)));
    const got = new Map(recipients.map((r) => [r, [] as string[]]));
    for (const [peer, list] of got) peer.on('message', (m) => list.push(m.body));
    const victim = cluster.nodes.find(
      (n) => recipients.some((r) => r.node === n.id) && !(sender.node === n.id),
    )!;
    process.kill(victim.pid, 'SIGTERM');
    for (let i = 0; i < 20; i++) await sender.send('*', `m${i}`);
    await waitFor(() => [...got.values()].every((list) => list.length >= 20), {
      timeoutMs: 15_000,
      what: 'every message',
    });
    for (const list of got.values())
      expect([...new Set(list)].sort()).toEqual(Array.from({ length: 20 }, (_, i) => `m${i}`).sort());
    expect(recipients.every((r) => r.node !== victim.id)).toBe(true);
  });
});
