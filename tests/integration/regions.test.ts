/**
 * Two regions on this machine (docs/multi-region.md): a throw-away Postgres primary (region a) and a real
 * streaming replica of it (region b, replicating through a 20 ms latency proxy), a throw-away Redis per
 * region, and one broker per region: a with the primary for everything, b reading its list reads from the
 * replica (DATABASE_READ_URL), each publishing the bus to the other's Redis (REDIS_REMOTE_URLS), the shared
 * counters on region a's Redis (REDIS_COUNTERS_URL). Each node has its own flags file, so a mixed cluster
 * (one node flipped, one not) is a state the test can hold.
 *
 * Shown: peers.list served from the replica with ha.regions on and from the primary off (counted by
 * mesh_broker_region_reads_total), a DM and a stream publish across the regions over the two Redis
 * servers (the periodic delivery check is slowed to a minute, so the DM rides the bus), the home-region rule
 * (a mesh homed in b: its clock led by b's node while b is alive, by a's after b's node stopped), ha.regions
 * flipped on both nodes mid-traffic with no DM lost or reordered, and a mixed cluster: one clock leader.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pushRefreshOnce } from '../../broker/flag-refresh.js';
import { PostgresPrimary, PostgresReplica } from '../../cli/cluster/pg-replica.js';
import { LatencyProxy } from '../../cli/proxies/latency-proxy.js';
import { renderFlagsDocument } from '../../flags/document.js';
import { type FlagValues, phasePreset } from '../../flags/registry.js';
import type { Frame, Message } from '../../protocol/frames.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { ThrowawayRedis } from '../helpers/redis-server.js';
import { seriesValue } from '../helpers/verifier.js';
import { waitFor } from '../helpers/wait.js';

const FLAGS_ENV = 'regions';
const PREFIX = `wbregions:${randomBytes(3).toString('hex')}:`;

let primary: PostgresPrimary;
let replica: PostgresReplica;
let link: LatencyProxy;
let redisA: ThrowawayRedis;
let redisB: ThrowawayRedis;
let a: InProcessNode;
let b: InProcessNode;
const flagsDirs = new Map<InProcessNode, string>();
const stopped = new Set<InProcessNode>();

function writeFlags(dir: string, values: FlagValues): void {
  const temporary = join(dir, `.${FLAGS_ENV}.${randomBytes(3).toString('hex')}`);
  writeFileSync(temporary, renderFlagsDocument(values));
  renameSync(temporary, join(dir, `${FLAGS_ENV}.json`));
}

async function startRegionNode(region: 'a' | 'b', flags: FlagValues): Promise<InProcessNode> {
  const dir = mkdtempSync(join(tmpdir(), `wb-regions-${region}-`));
  writeFlags(dir, flags);
  const [own, other] = region === 'a' ? [redisA, redisB] : [redisB, redisA];
  const node = await startNode({
    kind: 'in-process',
    databaseUrl: primary.url,
    env: {
      // A throw-away server of the test's own, without the brokers' role until migrated: a migrates it as owner.
      MIGRATE_ON_START: '1',
      HEARTBEAT_MS: '500',
      NODE_DEAD_MS: '1500',
      PRESENCE_GRACE_MS: '1000',
      FLAGS_POLL_MS: '500',
      // A minute: a DM across the regions must ride the bus (the wake-up), not the backstop.
      DELIVERY_CHECK_MS: '60000',
      CLOCK_TICK_MS: '200',
      // Traffic below the default send limit's burst would be throttled (the counters are shared: a's Redis).
      SEND_BURST: '1000',
      SEND_RATE_PER_MIN: '100000',
      NODE_ID: `region-${region}-${randomBytes(2).toString('hex')}`,
      REGION: region,
      PRIMARY_REGION: 'a',
      REDIS_URL: own!.url,
      REDIS_REMOTE_URLS: other!.url,
      REDIS_COUNTERS_URL: redisA.url,
      REDIS_KEY_PREFIX: PREFIX,
      ...(region === 'b' ? { DATABASE_READ_URL: replica.url } : {}),
      FLAGS_DIR: dir,
      FLAGS_ENV,
    },
  });
  flagsDirs.set(node, dir);
  return node;
}

/** Sets ha.regions on `nodes` (each its own file, pushed on its own Redis) and waits until they act on it. */
async function setRegions(nodes: InProcessNode[], value: boolean): Promise<void> {
  const target = value ? 'shared' : 'local';
  await Promise.all(
    nodes.map(async (node) => {
      if (node.events.using('ha.regions') === target) return;
      const landed = new Promise<void>((resolve) => {
        const listener = (event: { flag: string; using: string }) => {
          if (event.flag !== 'ha.regions' || event.using !== target) return;
          node.events.off('row.switched', listener);
          resolve();
        };
        node.events.on('row.switched', listener);
      });
      writeFlags(flagsDirs.get(node)!, { ...phasePreset(4), 'ha.regions': value });
      for (const redis of [redisA, redisB])
        await pushRefreshOnce({ redisUrl: redis.url, keyPrefix: PREFIX }, FLAGS_ENV, { reason: 'test' });
      await landed;
    }),
  );
}

async function reads(node: InProcessNode, pool: 'primary' | 'replica'): Promise<number> {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  return seriesValue(text, 'mesh_broker_region_reads_total', { pool, node: node.nodeId }) ?? 0;
}

async function clockLeader(peer: MeshClient): Promise<string | null> {
  return (await peer.request<Frame & { leader: string | null }>({ type: 'clock.get' })).leader;
}

beforeAll(async () => {
  primary = await PostgresPrimary.start();
  link = await LatencyProxy.start({ upstream: { port: primary.port }, delayMs: 20, jitterMs: 2 });
  replica = await PostgresReplica.start(primary, { via: { port: link.port } });
  redisA = await ThrowawayRedis.start();
  redisB = await ThrowawayRedis.start();
  a = await startRegionNode('a', phasePreset(4));
  // b migrates nothing new (a did); its reads wait for the schema to reach the replica.
  await replica.caughtUp();
  b = await startRegionNode('b', phasePreset(4));
}, 120_000);

afterAll(async () => {
  closeAllClients();
  for (const node of [b, a]) if (node && !stopped.has(node)) await node.stop().catch(() => {});
  for (const dir of flagsDirs.values()) rmSync(dir, { recursive: true, force: true });
  await redisA?.stop();
  await redisB?.stop();
  replica?.destroy();
  await link?.close();
  primary?.destroy();
}, 60_000);

describe('two regions', () => {
  let mesh: TestMesh;
  let onA: MeshClient;
  let onB: MeshClient;

  beforeAll(async () => {
    mesh = await createMesh(a, 2);
    onA = await connectPeer(a.wsUrl, mesh, mesh.members[0]!);
    onB = await connectPeer(b.wsUrl, mesh, mesh.members[1]!);
  });

  it('serves peers.list from the replica with ha.regions on, from the primary with it off', async () => {
    const before = { replica: await reads(b, 'replica'), primary: await reads(b, 'primary') };
    // The replica shows the peer of region a once its presence row has been replayed there.
    const listed = await waitFor(async () => (await onB.peers()).some((p) => p.sessionId === onA.sessionId), {
      timeoutMs: 5000,
      what: "region a's peer in peers.list on b",
    });
    expect(listed).toBe(true);
    expect(await reads(b, 'replica')).toBeGreaterThan(before.replica);
    expect(await reads(b, 'primary')).toBe(before.primary);
    const lag = await (await fetch(`${b.url}/metrics`)).text();
    expect(seriesValue(lag, 'mesh_broker_replica_lag_seconds', { node: b.nodeId })).toBeGreaterThanOrEqual(0);
    // Region a has no read URL of its own: its reads are the primary's, and it reports no replica lag.
    expect(
      seriesValue(await (await fetch(`${a.url}/metrics`)).text(), 'mesh_broker_replica_lag_seconds', {}),
    ).toBe(undefined);

    await setRegions([b], false);
    const off = { replica: await reads(b, 'replica'), primary: await reads(b, 'primary') };
    expect((await onB.peers()).map((p) => p.sessionId)).toContain(onA.sessionId);
    expect(await reads(b, 'primary')).toBe(off.primary + 1);
    expect(await reads(b, 'replica')).toBe(off.replica);
    await setRegions([b], true);
  });

  it('delivers a DM and a stream publish across the regions, over the two Redis servers', async () => {
    const got = new Promise<Message>((resolve) => onB.on('message', resolve));
    const started = Date.now();
    await onA.send(mesh.members[1]!.pubkey, 'across');
    const message = await got;
    expect(message.body).toBe('across');
    // Well inside the minute of the periodic check: the wake-up crossed from a's Redis... to b's.
    expect(Date.now() - started).toBeLessThan(10_000);

    await onB.request({ type: 'stream.subscribe', stream: 'regions' });
    const data = new Promise<Frame>((resolve) =>
      onB.on('frame', (frame) => {
        if (frame.type === 'stream.data') resolve(frame);
      }),
    );
    await onA.request({ type: 'stream.publish', stream: 'regions', data: { n: 1 } });
    expect((await data).data).toEqual({ n: 1 });
  });

  it('loses nothing while ha.regions flips on both nodes mid-traffic', async () => {
    const receivedByB: string[] = [];
    const receivedByA: string[] = [];
    onB.on('message', (m: Message) => receivedByB.push(String(m.body)));
    onA.on('message', (m: Message) => receivedByA.push(String(m.body)));
    // Rounds of traffic (a DM each way, then a peers list: one round trip after the other) from before
    // the first flip until after the second: the flips themselves end the traffic, whatever they take.
    let count = 0;
    let flipping = true;
    const traffic = (async () => {
      for (; flipping || count < 40; count++) {
        if (count >= 400) throw new Error('400 rounds and the flips still not done');
        await onA.send(mesh.members[1]!.pubkey, `a${count}`);
        await onB.send(mesh.members[0]!.pubkey, `b${count}`);
        await onB.peers();
      }
    })();
    await setRegions([a, b], false);
    await setRegions([a, b], true);
    flipping = false;
    await traffic;
    const want = (p: string) => Array.from({ length: count }, (_, i) => `${p}${i}`);
    await waitFor(() => receivedByB.filter((x) => x.startsWith('a')).length >= count, {
      timeoutMs: 15_000,
      what: "a's DMs at b",
    });
    await waitFor(() => receivedByA.filter((x) => x.startsWith('b')).length >= count, {
      timeoutMs: 15_000,
      what: "b's DMs at a",
    });
    expect(receivedByB.filter((x) => x.startsWith('a'))).toEqual(want('a'));
    expect(receivedByA.filter((x) => x.startsWith('b'))).toEqual(want('b'));
  });

  it('a mixed cluster (a off, b on) keeps one clock leader', async () => {
    const mixed = await createMesh(a, 2);
    const set = await a.admin(`/admin/meshes/${mixed.meshId}/home-region`, {
      method: 'PUT',
      body: { region: 'b' },
    });
    expect(set.status).toBe(200);
    await setRegions([a], false);
    const peerA = await connectPeer(a.wsUrl, mixed, mixed.members[0]!);
    const peerB = await connectPeer(b.wsUrl, mixed, mixed.members[1]!);
    await peerA.request({ type: 'clock.set', speed: 10 });
    const leader = await waitFor(() => clockLeader(peerA), { timeoutMs: 5000, what: 'a clock leader' });
    // Both nodes agree on one leader (the lock on the primary is the fence whichever node tries), also
    // after several ticks (200 ms apart), each a chance for the other node to take the clock.
    for (let tick = 0; tick < 7; tick++) await peerB.next('frame', (f) => f.type === 'clock.tick', 5000);
    expect(await clockLeader(peerB)).toBe(await clockLeader(peerA));
    expect([a.nodeId, b.nodeId]).toContain(leader);
    await peerA.request({ type: 'clock.pause' });
    await setRegions([a], true);
  });

  it("a mesh homed in b: its clock is led by b's node while b is alive, by a's once b's node stopped", async () => {
    const homed = await createMesh(a, 2);
    const bad = await a.admin(`/admin/meshes/${homed.meshId}/home-region`, {
      method: 'PUT',
      body: { region: 'B!' },
    });
    expect(bad.status).toBe(400);
    const set = await a.admin(`/admin/meshes/${homed.meshId}/home-region`, {
      method: 'PUT',
      body: { region: 'b' },
    });
    expect(await set.json()).toEqual({ meshId: homed.meshId, homeRegion: 'b' });
    const shown = (await (await a.admin(`/admin/meshes/${homed.meshId}`)).json()) as { homeRegion: string };
    expect(shown.homeRegion).toBe('b');
    // Region a's peer first: its node may try first, and must leave the clock to b's.
    const peerA = await connectPeer(a.wsUrl, homed, homed.members[0]!);
    await peerA.request({ type: 'clock.set', speed: 10 });
    await connectPeer(b.wsUrl, homed, homed.members[1]!);
    await waitFor(async () => (await clockLeader(peerA)) === b.nodeId, {
      timeoutMs: 10_000,
      what: "b's node leading the clock of a mesh homed in b",
    });
    // Audited on the mesh's chain, like other changes.
    const audit = await primary.query<{ payload: unknown }>(
      `SELECT payload FROM audit_log WHERE mesh_id = $1 AND event_type = 'mesh.home_region_set'`,
      [homed.meshId],
    );
    expect(audit.rows.map((r) => r.payload)).toEqual([{ from: null, to: 'b' }]);

    stopped.add(b);
    await b.stop();
    await waitFor(async () => (await clockLeader(peerA)) === a.nodeId, {
      timeoutMs: 10_000,
      what: "a's node taking the clock once region b has no node",
    });
  });
});
