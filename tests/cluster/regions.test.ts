/**
 * Phase 4's two-region simulation through the CLI, the way a release manager runs it: `workbench up
 * --phase 4` in a fresh folder, the topology checked from outside (a replica really streaming through the
 * replication link, a cross-region DM paying the link's delay), a quick smoke, region B cut off (the entry
 * stops routing there) and restored, and `workbench down` leaving no process, port or folder behind.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { MeshClient } from '@mesh-broker/sdk';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { BROKER_ROLE, databaseUrlAs } from '../../broker/db/roles.js';
import type { ClusterFile } from '../../cli/cluster/local.js';
import { createLoadMeshes } from '../../cli/load/setup.js';
import { runWorkbench } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
import { listening, stillRunning } from '../helpers/process.js';
import { waitForOrGiveUp } from '../helpers/wait.js';

const RTT_MS = 40;
const cwd = mkdtempSync(join(tmpdir(), 'wb-regions-'));
const clients: MeshClient[] = [];

afterAll(async () => {
  for (const client of clients) client.close();
  await runWorkbench(['down'], {}, cwd);
  rmSync(cwd, { recursive: true, force: true });
});

const readState = () =>
  JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile;

async function query<R extends pg.QueryResultRow>(url: string, text: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(text)).rows;
  } finally {
    await client.end();
  }
}

/** The node that answers the entry's /health, or "none" (timeout, refused). */
const entryNode = (url: string) =>
  fetch(`${url}/health`, { signal: AbortSignal.timeout(1500) })
    .then(async (r) => String(((await r.json()) as { node?: string }).node))
    .catch(() => 'none');

describe('workbench up --phase 4 (two simulated regions)', { timeout: 240_000 }, () => {
  it('refuses bad region options before starting anything', async () => {
    for (const args of [
      ['--rtt-ms=-5'],
      ['--rtt-ms', 'fast'],
      ['--rtt-ms', '999999'],
      ['--jitter-ms', '30'], // more than the one-way delay of 40 ms RTT
      ['--nodes-per-region', '0'],
      ['--nodes', '3'],
    ]) {
      const result = await runWorkbench(['up', '--phase', '4', ...args], {}, cwd);
      expect(result.code, `${args.join(' ')}: ${result.stderr}`).toBe(2);
      expect(result.stderr).toMatch(/--(rtt-ms|jitter-ms|nodes-per-region|nodes)/);
    }
    const phase3 = await runWorkbench(['up', '--phase', '3', '--rtt-ms', '10'], {}, cwd);
    expect(phase3.code).toBe(2);
    expect(phase3.stderr).toContain('--rtt-ms is for phase 4');
    expect(existsSync(join(cwd, '.workbench', 'cluster.json'))).toBe(false);
  });

  it('runs both regions, streams, delays, smokes, cuts region B off and cleans up', async () => {
    const up = await runWorkbench(
      ['up', '--phase', '4', '--port', '0', '--rtt-ms', String(RTT_MS)],
      FAST_CLUSTER,
      cwd,
    );
    expect(up.code, up.stdout + up.stderr).toBe(0);
    const cluster = readState();
    const regions = cluster.regions!;
    expect(regions.list.map((r) => [r.name, r.postgres.role])).toEqual([
      ['a', 'primary'],
      ['b', 'replica'],
    ]);
    expect(cluster.nodes.map((n) => [n.id, n.region])).toEqual([
      ['broker-a1', 'a'],
      ['broker-a2', 'a'],
      ['broker-b1', 'b'],
      ['broker-b2', 'b'],
    ]);

    // A real standby, streaming from the primary through the replication link (the proxy's port).
    const replication = regions.links.find((l) => l.service === 'replication')!;
    const [receiver] = await query<{ status: string; sender_port: number }>(
      regions.list[1]!.postgres.url,
      'SELECT status, sender_port FROM pg_stat_wal_receiver',
    );
    expect(receiver).toEqual({ status: 'streaming', sender_port: Number(replication.address.split(':')[1]) });
    const [recovery] = await query<{ r: boolean }>(
      regions.list[1]!.postgres.url,
      'SELECT pg_is_in_recovery() AS r',
    );
    expect(recovery!.r).toBe(true);
    // Every broker writes through its region's database HAProxy (Patroni's leader: A's directly, B's
    // through the link) and reads through its read frontend (B's own replica), as the least-privilege role.
    const b1 = cluster.nodes.find((n) => n.id === 'broker-b1')!;
    expect(b1.env!.DATABASE_URL).toBe(databaseUrlAs(regions.list[1]!.pgLb.writeUrl, BROKER_ROLE));
    expect(b1.env!.DATABASE_READ_URL).toBe(databaseUrlAs(regions.list[1]!.pgLb.readUrl, BROKER_ROLE));
    expect(new URL(cluster.brokerDatabaseUrl!).username).toBe(BROKER_ROLE);
    // The per-region bus: B's brokers subscribe to B's own Redis and publish to A's through the link;
    // the counters are A's; list reads go to B's replica. Every Redis URL carries the brokers' ACL user.
    const credentials = new URL(regions.list[0]!.redis.url);
    expect(credentials.username).toBe('broker');
    expect(credentials.password).toMatch(/^[0-9a-f]{48}$/);
    // Without them, nothing: the default user is off (the error handler: the refused ready check).
    const anonymous = new Redis(`redis://127.0.0.1:${credentials.port}`, {
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      lazyConnect: true,
      enableReadyCheck: false,
    });
    anonymous.on('error', () => {});
    await anonymous.connect();
    await expect(anonymous.get(`${cluster.redisKeyPrefix}x`)).rejects.toThrow(/NOAUTH/);
    anonymous.disconnect();
    const redisLink = (from: string) =>
      `redis://broker:${credentials.password}@${regions.links.find((l) => l.from === from && l.service === 'redis')!.address}`;
    expect(b1.env).toMatchObject({
      REGION: 'b',
      PRIMARY_REGION: 'a',
      REDIS_URL: regions.list[1]!.redis.url,
      REDIS_REMOTE_URLS: redisLink('b'),
      REDIS_COUNTERS_URL: redisLink('b'),
    });
    const a1 = cluster.nodes.find((n) => n.id === 'broker-a1')!;
    expect(a1.env).toMatchObject({
      REGION: 'a',
      REDIS_URL: regions.list[0]!.redis.url,
      REDIS_REMOTE_URLS: redisLink('a'),
      REDIS_COUNTERS_URL: regions.list[0]!.redis.url,
    });

    // A DM sent in B to a peer in A: its durable write crosses the link, so it takes more than a round trip.
    const [lbA, lbB] = regions.list.map((r) => `${r.lb.url.replace('http', 'ws')}/ws`) as [string, string];
    const [planA, planB] = await createLoadMeshes(
      { url: cluster.nodes[0]!.url, token: cluster.adminToken },
      { peers: 2, meshes: 1 },
    );
    const inA = new MeshClient({ urls: [lbA], meshId: planA!.meshId, keys: planA!.keys });
    const inB = new MeshClient({ urls: [lbB], meshId: planB!.meshId, keys: planB!.keys });
    clients.push(inA, inB);
    await Promise.all([inA.connect(), inB.connect()]);
    const times: number[] = [];
    for (let i = 0; i < 5; i++) {
      const arrived = new Promise<void>((resolve) => {
        const on = (m: { body: string }) => {
          if (m.body !== `cross-${i}`) return;
          inA.off('message', on);
          resolve();
        };
        inA.on('message', on);
      });
      const started = performance.now();
      await inB.send(planA!.keys.pubkey, `cross-${i}`);
      await arrived;
      times.push(performance.now() - started);
    }
    expect(Math.min(...times)).toBeGreaterThan(2 * (RTT_MS / 2));

    const smoke = await runWorkbench(
      ['smoke', '--phase', '4', '--only', 'cross-node-dm,presence-cluster-wide,audit-chain-intact'],
      {},
      cwd,
    );
    expect(smoke.code, smoke.stdout + smoke.stderr).toBe(0);

    // `flags set` pushes "refresh now" on every region's Redis, each region's nodes subscribed to their
    // own: all four count (two on A's Redis, two on B's). (The file provider's own file watch would
    // bring the flip to a node on this machine anyway: the count is what shows the push reached B.)
    const flagValueIn = async (url: string) =>
      ((await (await fetch(`${url}/flags`)).json()) as { flags: Record<string, { value: boolean }> }).flags[
        'ha.regions'
      ]!.value;
    for (const state of ['off', 'on'] as const) {
      const set = await runWorkbench(
        ['flags', 'set', 'ha.regions', state, '--env', cluster.flagsEnv],
        {},
        cwd,
      );
      expect(set.code, set.stdout + set.stderr).toBe(0);
      expect(set.stdout).toContain('pushed to 4 subscribers');
      await waitForOrGiveUp(async () => (await flagValueIn(b1.url)) === (state === 'on'), {
        timeoutMs: 10_000,
        intervalMs: 50,
      });
      expect(await flagValueIn(b1.url)).toBe(state === 'on');
    }

    // Region B cut off: the entry's checks to B's load balancer time out, and it routes to A only.
    const nodesSeen = new Set<string>();
    for (let i = 0; i < 8; i++) nodesSeen.add(await entryNode(cluster.lb.url));
    expect([...nodesSeen].some((n) => n.startsWith('broker-b'))).toBe(true);
    const cut = await runWorkbench(['region', 'cut', 'b'], {}, cwd);
    expect(cut.code, cut.stderr).toBe(0);
    // Every link into or out of b is cut (b's Patroni loses etcd too); a's own link to etcd is not.
    const links = readState().regions!.links;
    expect(links.filter((l) => l.from === 'b' || l.to === 'b').every((l) => l.cut)).toBe(true);
    expect(links.filter((l) => l.from === 'a' && l.service === 'etcd').map((l) => l.cut)).toEqual([false]);
    const deadline = Date.now() + 15_000;
    let streak = 0;
    while (streak < 8 && Date.now() < deadline) {
      streak = (await entryNode(cluster.lb.url)).startsWith('broker-a') ? streak + 1 : 0;
    }
    expect(streak, 'eight answers in a row from region A after the cut').toBe(8);
    expect(await runWorkbench(['region', 'restore', 'b'], {}, cwd)).toMatchObject({ code: 0 });

    // Down leaves nothing: processes, ports, the servers' folders, the control socket.
    const latest = readState();
    const pids = [
      latest.regions!.supervisor.pid,
      latest.lb.pid,
      ...latest.nodes.map((n) => n.pid),
      ...latest.regions!.list.flatMap((r) => [r.lb.pid, r.redis.pid, r.patroni.pid, r.pgLb.pid]),
      latest.regions!.etcd.pid,
    ];
    const ports = [
      latest.lb.url,
      ...latest.nodes.map((n) => n.url),
      ...latest.regions!.list.flatMap((r) => [
        r.lb.url,
        r.redis.url,
        r.postgres.url,
        r.patroni.rest,
        r.pgLb.writeUrl,
        r.pgLb.readUrl,
      ]),
      latest.regions!.etcd.url,
    ].map((url) => Number(new URL(url).port));
    const down = await runWorkbench(['down'], {}, cwd);
    expect(down.code, down.stderr).toBe(0);
    expect(await stillRunning(pids)).toEqual([]);
    expect((await Promise.all(ports.map(listening))).some(Boolean)).toBe(false);
    for (const region of latest.regions!.list) expect(existsSync(region.postgres.dataDir)).toBe(false);
    expect(existsSync(latest.regions!.etcd.dataDir)).toBe(false);
    expect(existsSync(latest.regions!.supervisor.control)).toBe(false);
    expect(existsSync(join(cwd, '.workbench', 'cluster.json'))).toBe(false);
  });
});
