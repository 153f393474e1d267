/**
 * Many SDK sessions through one URL (a load balancer) with DM traffic between members of the same mesh,
 * recording what a rolling restart or a node kill must not break: every reconnect (its time from the
 * disconnect to the next welcome, and whether the welcome said `resumed`), every `peer.left` seen, every
 * acknowledged (`sent`) DM and every delivery. tests/cluster/rolling-restart.test.ts and
 * bench/rolling-restart.ts share it, so the bench measures what the test checks (here, in bench/lib: the
 * bench runs from dist/, which tests/ is not part of).
 */
import { performance } from 'node:perf_hooks';
import { MeshClient } from '@mesh-broker/sdk';
import type { LoadPeerPlan } from '../../cli/load/setup.js';

/** The traffic's pace (bench/ runs from dist/ alone, so not tests/helpers' `pause`). */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface Reconnect {
  session: number;
  /** performance.now() of the `disconnected` event. */
  lostAt: number;
  /** performance.now() of the next welcome. */
  welcomedAt: number;
  resumed: boolean;
  node: string;
}

export interface TrafficOptions {
  /** DMs per second over the whole fleet. */
  perSecond: number;
  /** Sends not yet `sent` at once; a tick past it sends nothing (bounded memory and sockets). */
  maxInFlight?: number;
}

export class SessionFleet {
  readonly clients: MeshClient[] = [];
  readonly reconnects: Reconnect[] = [];
  /** `peer.left` frames seen by any session, per session id they name. */
  readonly peerLeft = new Map<string, number>();
  /** DMs the broker acknowledged (`sent`), by recipient index. */
  readonly acked = new Map<number, Set<string>>();
  /** DMs delivered, by recipient index. */
  readonly delivered = new Map<number, Set<string>>();
  /** Sends that failed (rejected): none is expected, a failed send is not acknowledged. */
  failedSends = 0;
  private readonly lostAt = new Map<number, number>();
  private readonly byMesh = new Map<string, number[]>();
  private sentCount = 0;

  constructor(readonly plans: LoadPeerPlan[]) {
    plans.forEach((plan, i) => {
      const list = this.byMesh.get(plan.meshId) ?? [];
      list.push(i);
      this.byMesh.set(plan.meshId, list);
    });
  }

  /** Connects every session, `concurrency` hellos at a time; resolves once all are welcomed. */
  async connect(wsUrl: string, concurrency = 50): Promise<void> {
    for (let i = 0; i < this.plans.length; i += concurrency) {
      const batch = this.plans
        .slice(i, i + concurrency)
        .map((plan, k) => this.connectOne(wsUrl, plan, i + k));
      await Promise.all(batch);
    }
  }

  private async connectOne(wsUrl: string, plan: LoadPeerPlan, index: number): Promise<void> {
    const client = new MeshClient({
      urls: [wsUrl],
      meshId: plan.meshId,
      keys: plan.keys,
      backoff: { initialMs: 50, maxMs: 1000 },
    });
    this.clients[index] = client;
    this.delivered.set(index, new Set());
    client.on('message', (m) => this.delivered.get(index)!.add(m.body));
    client.on('peer.left', (left) =>
      this.peerLeft.set(left.sessionId, (this.peerLeft.get(left.sessionId) ?? 0) + 1),
    );
    let welcomed = false;
    client.on('disconnected', () => {
      // A session is lost only once it was welcomed: a first attempt that failed before its welcome (a
      // hello timed out on a loaded machine) is still the session's first connect, not a resume.
      if (welcomed && !this.lostAt.has(index)) this.lostAt.set(index, performance.now());
    });
    client.on('welcome', (welcome) => {
      const first = !welcomed;
      welcomed = true;
      const lostAt = this.lostAt.get(index);
      if (first || lostAt === undefined) return;
      this.lostAt.delete(index);
      this.reconnects.push({
        session: index,
        lostAt,
        welcomedAt: performance.now(),
        resumed: welcome.resumed,
        node: welcome.node,
      });
    });
    await client.connect();
  }

  /** Sessions that lost their connection and have not been welcomed again yet. */
  get reconnecting(): number {
    return this.lostAt.size;
  }

  /** DMs at `perSecond` from random members to random others of the same mesh, until `stop()`. */
  traffic(options: TrafficOptions): { stop: () => Promise<void> } {
    let running = true;
    let inFlight = 0;
    const maxInFlight = options.maxInFlight ?? 200;
    const tickMs = 20;
    const perTick = options.perSecond / (1000 / tickMs);
    let owed = 0;
    const loop = (async () => {
      while (running) {
        owed += perTick;
        for (; owed >= 1; owed--) {
          if (inFlight >= maxInFlight) continue;
          inFlight++;
          void this.sendOne().finally(() => inFlight--);
        }
        await sleep(tickMs);
      }
      while (inFlight > 0) await sleep(tickMs); // the last sends finishing
    })();
    return {
      stop: async () => {
        running = false;
        await loop;
      },
    };
  }

  private async sendOne(): Promise<void> {
    const from = Math.floor(Math.random() * this.clients.length);
    const mates = this.byMesh.get(this.plans[from]!.meshId)!;
    if (mates.length < 2) return;
    let to = from;
    while (to === from) to = mates[Math.floor(Math.random() * mates.length)]!;
    const body = `dm-${this.sentCount++}`;
    try {
      await this.clients[from]!.send(this.plans[to]!.keys.pubkey, body);
      const set = this.acked.get(to) ?? new Set<string>();
      set.add(body);
      this.acked.set(to, set);
    } catch {
      this.failedSends++;
    }
  }

  /** Acknowledged DMs not delivered to their recipient (yet). */
  undelivered(): number {
    let missing = 0;
    for (const [to, bodies] of this.acked)
      for (const body of bodies) if (!this.delivered.get(to)!.has(body)) missing++;
    return missing;
  }

  get ackedCount(): number {
    let n = 0;
    for (const bodies of this.acked.values()) n += bodies.size;
    return n;
  }

  /** Each mesh's `peers.list`, every page: the sessions it lists, session id → how many times. */
  async listed(): Promise<Map<string, number>> {
    const counts = new Map<string, number>();
    for (const members of this.byMesh.values()) {
      const client = this.clients[members[0]!]!;
      let cursor: string | undefined;
      do {
        const page = (await client.request({
          type: 'peers.list',
          ...(cursor ? { cursor } : {}),
        })) as unknown as {
          peers: Array<{ sessionId: string }>;
          next?: string;
        };
        for (const peer of page.peers) counts.set(peer.sessionId, (counts.get(peer.sessionId) ?? 0) + 1);
        cursor = page.next;
      } while (cursor);
    }
    return counts;
  }

  close(): void {
    for (const client of this.clients) client?.close();
  }
}
