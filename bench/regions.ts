/**
 * g) Phase 4 on the two-region simulation (`workbench up --phase 4`, docs/multi-region.md), started through
 * the CLI in a fresh folder with the short timings of the cluster tests. The floor is the configured RTT:
 * every cross-region figure is also given as a multiple of it. Peers "in" a region connect to that region's
 * load balancer (as geo-DNS would send them); the entry is used where the failure needs it.
 *
 * Measured, in one run: DM latency (send → `message` at the receiver) A→A, A→B, B→A, B→B; `peers.list` in
 * each region; `peer.joined` of a new peer in A as seen in A and in B; clock tick intervals seen in A and
 * in B; the replica's lag sampled every 100 ms while the DMs run; region B cut off (what a send from a peer
 * in B gets, when the entry stops sending new peers to B, how soon a peer that reconnects through the
 * entry is served in A); region A's primary (its node: Patroni and Postgres) killed under a steady stream
 * of sends, Patroni promoting B's replica (acknowledged messages missing afterwards, time from the kill to
 * the first accepted send), in asynchronous or synchronous mode (`sync`).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { MeshClient } from '@mesh-broker/sdk';
import pg from 'pg';
import { packageRoot } from '../broker/paths.js';
import { FAST_CLUSTER } from '../cli/cluster/fast-timings.js';
import type { ClusterFile } from '../cli/cluster/local.js';
import { createLoadMeshes, type LoadPeerPlan } from '../cli/load/setup.js';
import type { Frame, PeerJoined } from '../protocol/frames.js';
import { percentiles, round } from './lib/stats.js';

const WORKBENCH = join(packageRoot(), 'dist', 'cli', 'main.js');
const stage = (what: string) => console.error(`bench regions: ${what}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface RegionsOptions {
  rttMs: number;
  jitterMs: number;
  /** DMs per direction (sequential: one in flight). */
  dms: number;
  /** `peers.list` calls per region. */
  lists: number;
  /** New peers joining (each seen in both regions). */
  joins: number;
  /** Clock ticks to collect. */
  ticks: number;
  /** Patroni's synchronous mode (`up --phase 4 --sync`): zero acknowledged loss, a round trip per commit. */
  sync: boolean;
}

function workbench(cwd: string, args: string[], env: Record<string, string> = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WORKBENCH, ...args], {
      cwd,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
    });
    child.stderr.on('data', (c) => {
      out += c;
    });
    child.on('close', (code) =>
      code === 0 ? resolve(out) : reject(new Error(`workbench ${args.join(' ')}: exit ${code}\n${out}`)),
    );
  });
}

const p50p99 = (values: number[]) => {
  const { p50, p99 } = percentiles(values);
  return { n: values.length, p50: round(p50), p99: round(p99) };
};

class Peer {
  readonly client: MeshClient;
  readonly pubkey: string;
  constructor(urls: string[], plan: LoadPeerPlan, name: string) {
    this.pubkey = plan.keys.pubkey;
    this.client = new MeshClient({
      urls,
      meshId: plan.meshId,
      keys: plan.keys,
      name,
      requestTimeoutMs: 5000,
      backoff: { initialMs: 100, maxMs: 1000 },
    });
    this.client.on('error', () => {});
  }
}

const ws = (url: string) => `${url.replace('http', 'ws')}/ws`;

export async function benchRegions(options: RegionsOptions) {
  const cwd = mkdtempSync(join(tmpdir(), 'wb-bench-regions-'));
  // Sequential DMs from one peer far exceed the default send rate: the limit is not what is measured.
  const env = {
    ...FAST_CLUSTER,
    CLOCK_TICK_MS: '200',
    LOG_LEVEL: 'warn',
    SEND_RATE_PER_MIN: '100000',
    SEND_BURST: '10000',
  };
  await workbench(
    cwd,
    [
      'up',
      '--phase',
      '4',
      '--port',
      '0',
      '--rtt-ms',
      String(options.rttMs),
      '--jitter-ms',
      String(options.jitterMs),
      ...(options.sync ? ['--sync'] : []),
    ],
    env,
  );
  const peers: Peer[] = [];
  try {
    const cluster = JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile;
    const regions = cluster.regions!;
    const [lbA, lbB] = regions.list.map((r) => ws(r.lb.url)) as [string, string];
    const entry = ws(cluster.lb.url);
    const admin = { url: cluster.nodes[0]!.url, token: cluster.adminToken };
    const plans = await createLoadMeshes(admin, { peers: 6 + options.joins, meshes: 1 });
    const peer = async (urls: string[], i: number, name: string) => {
      const p = new Peer(urls, plans[i]!, name);
      peers.push(p);
      await p.client.connect();
      return p;
    };
    const a1 = await peer([lbA], 0, 'a1');
    const a2 = await peer([lbA], 1, 'a2');
    const b1 = await peer([lbB, entry], 2, 'b1');
    const b2 = await peer([lbB, entry], 3, 'b2');

    // Replica lag, sampled while the DMs run.
    const replica = new pg.Client({ connectionString: regions.list[1]!.postgres.url });
    const primary = new pg.Client({ connectionString: regions.list[0]!.postgres.url });
    for (const client of [replica, primary]) {
      // The primary is killed below; a query then fails, which is handled.
      client.on('error', (error) => stage(`lag client: ${error.message}`));
      await client.connect();
    }
    const lagMs: number[] = [];
    const lagBytes: number[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        try {
          const r = (
            await replica.query<{ lsn: string; age: number | null }>(
              `SELECT pg_last_wal_replay_lsn()::text AS lsn,
                    (extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000)::float8 AS age`,
            )
          ).rows[0]!;
          const bytes = Number(
            (
              await primary.query<{ b: string }>(
                'SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text AS b',
                [r.lsn],
              )
            ).rows[0]!.b,
          );
          lagBytes.push(Math.max(0, bytes));
          lagMs.push(bytes > 0 ? Math.max(0, r.age ?? 0) : 0);
        } catch (error) {
          stage(`lag sample failed: ${(error as Error).message}`);
          sampling = false;
        }
        await sleep(100);
      }
    })();

    const dm = async (from: Peer, to: Peer, n: number) => {
      const latencies: number[] = [];
      for (let i = 0; i < n; i++) {
        const body = `dm-${performance.now()}-${i}`;
        const started = performance.now();
        const arrived = new Promise<void>((resolve) => {
          const on = (m: { body: string }) => {
            if (m.body !== body) return;
            to.client.off('message', on);
            resolve();
          };
          to.client.on('message', on);
        });
        await from.client.send(to.pubkey, body);
        await arrived;
        latencies.push(performance.now() - started);
      }
      return p50p99(latencies);
    };
    stage('DMs');
    const dms = {
      aToA: await dm(a1, a2, options.dms),
      aToB: await dm(a1, b1, options.dms),
      bToA: await dm(b1, a1, options.dms),
      bToB: await dm(b1, b2, options.dms),
    };
    sampling = false;
    await sampler;

    const list = async (p: Peer) => {
      const latencies: number[] = [];
      for (let i = 0; i < options.lists; i++) {
        const started = performance.now();
        await p.client.peers();
        latencies.push(performance.now() - started);
      }
      return p50p99(latencies);
    };
    stage('peers.list');
    const peersList = { a: await list(a1), b: await list(b1) };

    stage('presence');
    // Presence: a new peer connects in A; when do a peer in A and a peer in B see its peer.joined?
    const joinedA: number[] = [];
    const joinedB: number[] = [];
    for (let j = 0; j < options.joins; j++) {
      const plan = plans[6 + j]!;
      const seen = (p: Peer) =>
        new Promise<number>((resolve) => {
          const on = (frame: PeerJoined) => {
            if (frame.pubkey !== plan.keys.pubkey) return;
            p.client.off('peer.joined', on);
            resolve(performance.now());
          };
          p.client.on('peer.joined', on);
        });
      const inA = seen(a2);
      const inB = seen(b2);
      const started = performance.now();
      const joiner = await peer([lbA], 6 + j, `join-${j}`);
      const [tA, tB] = await Promise.all([inA, inB]);
      joinedA.push(tA - started);
      joinedB.push(tB - started);
      joiner.client.close();
    }
    const presence = { seenInA: p50p99(joinedA), seenInB: p50p99(joinedB) };

    stage('clock');
    // Clock: set on a peer in A; intervals between ticks seen in A and in B.
    const ticks = (p: Peer) => {
      const at: number[] = [];
      const on = (frame: Frame) => {
        if (frame.type === 'clock.tick') at.push(performance.now());
      };
      p.client.on('frame', on);
      return () => {
        p.client.off('frame', on);
        return at.slice(1).map((t, i) => t - at[i]!);
      };
    };
    const stopA = ticks(a2);
    const stopB = ticks(b2);
    await a1.client.request({ type: 'clock.set', speed: 1 });
    await sleep(options.ticks * 200 + 500);
    await a1.client.request({ type: 'clock.pause' });
    const clock = { intervalsInA: p50p99(stopA()), intervalsInB: p50p99(stopB()), tickMs: 200 };

    stage('cut');
    // Region B cut off.
    const cutAt = performance.now();
    await workbench(cwd, ['region', 'cut', 'b']);
    // What a peer in B gets for a send, and when the entry stops sending new peers to B: concurrently.
    const sendInB = b1.client.send(a1.pubkey, 'during-cut', { timeoutMs: 8000 }).then(
      () => ({ outcome: 'sent', ms: round(performance.now() - cutAt) }),
      (error: Error) => ({ outcome: error.message.slice(0, 120), ms: round(performance.now() - cutAt) }),
    );
    let entryOnlyAMs: number | undefined;
    for (let streak = 0; performance.now() - cutAt < 20_000 && entryOnlyAMs === undefined; ) {
      const node = await fetch(`${cluster.lb.url}/health`, { signal: AbortSignal.timeout(1000) })
        .then(async (r) => String(((await r.json()) as { node?: string }).node))
        .catch(() => 'timeout');
      // The first of four answers in a row from region A (the entry round-robins over both regions).
      streak = node.startsWith('broker-a') ? streak + 1 : 0;
      if (streak >= 4) entryOnlyAMs = round(performance.now() - cutAt);
      await sleep(50);
    }
    const viaEntryStarted = performance.now();
    const newcomer = await peer([entry], 4, 'b-newcomer');
    const viaEntry = { connectMs: round(performance.now() - viaEntryStarted) };
    const sentViaEntry = await newcomer.client.send(a1.pubkey, 'via-entry').then(
      () => true,
      () => false,
    );
    await workbench(cwd, ['region', 'restore', 'b']);
    const cut = {
      sendInB: await sendInB,
      entryOnlyAMs,
      newcomerThroughEntry: { ...viaEntry, sent: sentViaEntry },
    };
    await sleep(3000); // B's nodes pass their checks again

    stage('primary killed, Patroni failover');
    // Primary killed under steady sends from a peer in A; Patroni promotes B's replica.
    const acked: string[] = [];
    let sending = true;
    let firstAfterKill: number | undefined;
    let killedAt = 0;
    const sender = (async () => {
      let i = 0;
      while (sending) {
        const id = `promo-${i++}-${Math.random().toString(36).slice(2)}`;
        const started = performance.now();
        try {
          await a1.client.send(a2.pubkey, id, { id, timeoutMs: 3000 });
          acked.push(id);
          // Writes resumed: a send started after the primary was gone was accepted.
          if (killedAt && started > killedAt && firstAfterKill === undefined)
            firstAfterKill = performance.now();
        } catch {
          await sleep(100);
        }
      }
    })();
    await sleep(2000);
    await primary.end().catch(() => {});
    await replica.end().catch(() => {});
    await workbench(cwd, ['region', 'kill-primary']);
    killedAt = performance.now();
    const ackedBeforeKill = acked.length;
    // No promotion by hand: Patroni promotes B once A's leader key expires, and the brokers' database
    // HAProxy follows the new leader.
    const deadline = performance.now() + 90_000;
    while (firstAfterKill === undefined && performance.now() < deadline) await sleep(100);
    sending = false;
    await sender;
    const leaderDeadline = performance.now() + 15_000;
    const leader = () =>
      (JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile).regions!
        .primaryRegion;
    while (leader() !== 'b' && performance.now() < leaderDeadline) await sleep(200);
    const promoted = new pg.Client({ connectionString: regions.list[1]!.postgres.url });
    promoted.on('error', () => {});
    await promoted.connect();
    const present = Number(
      (
        await promoted.query<{ n: string }>(
          'SELECT count(*)::text AS n FROM messages WHERE client_id = ANY($1)',
          [acked],
        )
      ).rows[0]!.n,
    );
    await promoted.end();
    const promotion = {
      ackedTotal: acked.length,
      ackedBeforeKill,
      mode: options.sync ? 'sync' : 'async',
      missingAfterFailover: acked.length - present,
      writesResumedAfterKillMs: firstAfterKill === undefined ? null : round(firstAfterKill - killedAt),
      newLeader: leader(),
    };

    return {
      rttMs: options.rttMs,
      jitterMs: options.jitterMs,
      dms: {
        ...dms,
        crossToSameP50: round(dms.aToB.p50 / dms.aToA.p50, 2),
        aToBInRtts: round(dms.aToB.p50 / options.rttMs, 2),
      },
      peersList,
      presence,
      clock,
      replicaLag: {
        samples: lagMs.length,
        msP50: round(percentiles(lagMs).p50),
        msP99: round(percentiles(lagMs).p99),
        msMax: round(Math.max(...lagMs)),
        bytesP99: round(percentiles(lagBytes).p99, 0),
      },
      cut,
      promotion,
    };
  } finally {
    for (const p of peers) p.client.close();
    await workbench(cwd, ['down']).catch((error) => console.error(String(error)));
    rmSync(cwd, { recursive: true, force: true });
  }
}
