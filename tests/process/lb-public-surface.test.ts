/**
 * Nothing public by accident (issue 30 item 6), through the real HAProxy of a `workbench up` started from
 * a shell whose HOST names every interface, with raw HTTP as anyone who reaches the load balancer sends it:
 *
 * - `/metrics` and `/flags` answer 401 without the metrics token (or the admin token), 200 with it; the
 *   peer WebSocket, `/health` and the hook answer without credentials, as before;
 * - the nodes listen on loopback whatever HOST the shell has;
 * - a member's watch of a loopback address is refused (`workbench up` no longer allows private targets);
 * - `workbench status` still reads every node's flags and metrics.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClusterFile } from '../../cli/cluster/local.js';
import { runWorkbench } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let cwd: string;
let cluster: ClusterFile & { metricsToken?: string };

beforeAll(async () => {
  db = await createTestDatabase('lb_public');
  cwd = mkdtempSync(join(tmpdir(), 'wb-lb-public-'));
  const up = await runWorkbench(
    ['up', '--phase', '0', '--port', '0', '--lb', 'haproxy', '--database-url', db.url],
    // zsh sets HOST to the machine's name; here it names every interface.
    // WATCH_ALLOW_PRIVATE empty: the default (the helper's timings allow private targets for the smoke suite).
    { ...FAST_CLUSTER, WATCH_ALLOW_PRIVATE: '', HOST: '0.0.0.0' },
    cwd,
  );
  expect(up.code, up.stderr).toBe(0);
  cluster = JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as typeof cluster;
}, 90_000);
afterAll(async () => {
  closeAllClients();
  if (cwd) await runWorkbench(['down'], {}, cwd);
  if (cwd) rmSync(cwd, { recursive: true, force: true });
  await db?.drop();
});

const get = (path: string, token?: string) =>
  fetch(`${cluster.lb.url}${path}`, token ? { headers: { authorization: `Bearer ${token}` } } : {});

/** The local address of every listening TCP socket on `port` (from /proc, as `ss -ltn` shows it). */
function listeningAddresses(port: number): string[] {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  const found: string[] = [];
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(file, 'utf8').split('\n').slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      if (state === '0A' && local?.endsWith(`:${hexPort}`)) found.push(local.split(':')[0]!);
    }
  }
  return found;
}

describe('what answers through the load balancer of workbench up', () => {
  it('refuses /metrics and /flags without a token (401, nothing of them in the body) and serves them with it', async () => {
    for (const path of ['/metrics', '/flags']) {
      const bare = await get(path);
      expect(bare.status, path).toBe(401);
      const text = await bare.text();
      expect(text).not.toMatch(/mesh_broker_|"flags"/);
      expect((await get(path, 'not-the-token-0123456789')).status, path).toBe(401);
    }
    expect(cluster.metricsToken).toMatch(/^[\w-]{32,}$/);
    const metrics = await get('/metrics', cluster.metricsToken);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain('mesh_broker_');
    expect((await get('/flags', cluster.metricsToken)).status).toBe(200);
    // The operator's admin token reads them too (the workbench's own readers use it).
    expect((await get('/metrics', cluster.adminToken)).status).toBe(200);
  });

  it('still answers health and the hook without credentials (the hook creating nothing for an unknown session)', async () => {
    expect((await get('/health')).status).toBe(200);
    const hook = await fetch(`${cluster.lb.url}/hook/status`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sessionId: randomUUID(), status: 'idle' }),
    });
    expect(hook.status).toBe(404);
  });

  it('runs its nodes on loopback although HOST named every interface', () => {
    for (const node of cluster.nodes) {
      const addresses = listeningAddresses(Number(new URL(node.url).port));
      expect(addresses.length, node.id).toBeGreaterThan(0);
      // 127.0.0.1 as /proc writes it (little-endian hex).
      expect(addresses, node.id).toEqual(addresses.map(() => '0100007F'));
    }
  });

  it("refuses a member's watch of a loopback address by default", async () => {
    const admin = {
      admin: (path: string, init: { body?: unknown } = {}) =>
        fetch(`${cluster.lb.url}${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${cluster.adminToken}`, 'content-type': 'application/json' },
          body: JSON.stringify(init.body ?? {}),
        }),
    };
    const mesh = await createMesh(admin, 1);
    const peer = await connectPeer(`${cluster.lb.url.replace(/^http/, 'ws')}/ws`, mesh, mesh.members[0]!);
    const node = cluster.nodes[0]!.url;
    await expect(
      peer.request({ type: 'watch.create', mode: 'status', intervalSec: 5, url: `${node}/health` }),
    ).rejects.toThrow(/forbidden: watch target 127\.0\.0\.1 is a loopback address/);
  });

  it('workbench status still reads every node: health, flags and metrics', async () => {
    const status = await runWorkbench(['status', '--json'], {}, cwd);
    expect(status.code, status.stderr + status.stdout).toBe(0);
    const report = JSON.parse(status.stdout) as { nodes: Array<{ health: string; disagreements: unknown }> };
    expect(report.nodes.length).toBe(cluster.nodes.length);
    for (const node of report.nodes) {
      expect(node.health).toBe('ok');
      expect(node.disagreements).not.toBeNull();
    }
  });
});
