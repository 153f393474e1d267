/**
 * What runs on the cluster while the faults happen, each recording what it saw for verify.ts:
 * - load: the `workbench load` generator and checker (DMs, broadcasts, group sends, streams), peers
 *   spread over the load balancer and every node, each failing over to the others;
 * - mcp (./mcp-workload.ts) and watches (./watch-workload.ts);
 * - schedules: one-off schedules created during the run and due during it, the recipient member watching
 *   with a session on every node (so an occurrence is seen wherever it fires; one fired twice has two
 *   message ids, one delivered to several sessions has one);
 * - clock: a mesh clock at top speed, every tick recorded by an observer session on every node.
 * Each also records what it does and sees into the run's history (cli/history/format.ts): the load's
 * sends, deliveries, acks and stream publishes and receives; schedule creations and firings; clock ticks.
 */
import type { MeshClient as Client, MemberKeys } from '@mesh-broker/sdk';
import { MeshClient } from '@mesh-broker/sdk';
import type { Frame, Message, Welcome } from '../../protocol/frames.js';
import { Random } from '../fuzz/random.js';
import type { Recorder } from '../history/writer.js';
import type { DeliveryChecker, Kind } from '../load/checker.js';
import { type GeneratorFacts, generateLoad, INDETERMINATE } from '../load/generator.js';
import { createLoadMeshes, type LoadPeerPlan } from '../load/setup.js';
import { sleep } from './sleep.js';

export interface ChaosCluster {
  adminUrl: string;
  adminToken: string;
  /** The load balancer's WebSocket URL. */
  lbWs: string;
  /** Each node's WebSocket URL, by node id. */
  nodeWs: Array<{ id: string; ws: string }>;
}

/**
 * Peers of the load and how its rates follow from the target (durable sends per second, 25 % of the
 * capacity measured in the run: ./capacity.ts): DMs, broadcasts and group sends share the target,
 * stream publishes (judged by the history's stream checker only: at most once, in publish order) come on
 * top at half of it, MCP calls at a tenth. The target is bounded both ways: at least the 7.5 a second of
 * the runs before the probe (a probe on a starved machine still loads the cluster), at most 150 (the
 * checker holds every accepted message and the history every operation: memory stays bounded).
 */
export const LOAD_SHAPE = {
  peers: 24,
  meshes: 2,
  fraction: 0.25,
  minTarget: 7.5,
  maxTarget: 150,
};

export interface WorkloadRates extends Record<Kind, number> {
  mcp: number;
}

/** Durable sends per second for a measured capacity (DMs per second): the fraction, within the bounds. */
export function targetFor(capacity: number): number {
  const target = Math.ceil(capacity * LOAD_SHAPE.fraction * 10) / 10;
  return Math.min(LOAD_SHAPE.maxTarget, Math.max(LOAD_SHAPE.minTarget, target));
}

export function ratesFor(target: number): WorkloadRates {
  const round = (v: number) => Math.round(v * 10) / 10;
  return {
    dm: round(target * 0.7),
    broadcast: round(target * 0.1),
    group: round(target * 0.2),
    stream: round(target * 0.5),
    mcp: Math.max(1, round(target * 0.1)),
  };
}

function client(urls: string[], plan: LoadPeerPlan, name: string): Client {
  return new MeshClient({
    urls,
    meshId: plan.meshId,
    keys: plan.keys,
    name,
    requestTimeoutMs: 10_000,
    backoff: { initialMs: 100, maxMs: 1000 },
  });
}

/** A node's URL first, the others after it: a session that starts there and fails over when it dies. */
export function from(cluster: ChaosCluster, index: number): string[] {
  const urls = cluster.nodeWs.map((n) => n.ws);
  return urls.map((_, j) => urls[(index + j) % urls.length]!);
}

/**
 * The load peers ack each message this long after it arrived (as an application acks after its work), so
 * a session that moves with a fault has messages written but not acked: its next node replays them and
 * the SDK must drop them (`no-duplicates`; before, a run often saw no redelivery at all).
 */
const LOAD_ACK_DELAY_MS = 500;

export async function runLoad(
  cluster: ChaosCluster,
  checker: DeliveryChecker,
  options: {
    rates: Record<Kind, number>;
    durationMs: number;
    drainMs: number;
    signal: AbortSignal;
    history?: Recorder;
    /** Off for the planted bug `sdk-dedup-off` only. */
    dedup?: boolean;
  },
): Promise<GeneratorFacts> {
  const plans = await createLoadMeshes(
    { url: cluster.adminUrl, token: cluster.adminToken },
    { peers: LOAD_SHAPE.peers, meshes: LOAD_SHAPE.meshes },
  );
  return generateLoad(
    {
      // Peer i starts on entry i mod 4 (the load balancer or a node) and fails over to the others.
      wsUrls: loadEntries(cluster),
      plans,
      rates: options.rates,
      durationMs: options.durationMs,
      maxMessages: 10_000_000,
      drainMs: options.drainMs,
      signal: options.signal,
      history: options.history,
      judgeStreams: false,
      dedup: options.dedup,
      ackDelayMs: LOAD_ACK_DELAY_MS,
    },
    checker,
  );
}

/** Where load peers start: the load balancer and every node. */
export const loadEntries = (cluster: ChaosCluster) => [cluster.lbWs, ...cluster.nodeWs.map((n) => n.ws)];

export class ScheduleWorkload {
  /** Per schedule id, the message ids of its occurrences the recipient saw (any of its sessions). */
  readonly fired = new Map<string, Set<string>>();
  /** Schedules whose creation was confirmed, with when they were due. */
  readonly created = new Map<string, number>();
  createFailures = 0;
  private readonly clients: Client[] = [];

  private constructor(
    readonly meshId: string,
    private readonly creator: Client,
    private readonly recipient: MemberKeys,
    private readonly history: Recorder,
  ) {}

  static async start(cluster: ChaosCluster, history?: Recorder): Promise<ScheduleWorkload> {
    const [creatorPlan, recipientPlan] = await createLoadMeshes(
      { url: cluster.adminUrl, token: cluster.adminToken },
      { peers: 2, meshes: 1 },
    );
    const creator = client([cluster.lbWs], creatorPlan!, 'chaos-scheduler');
    const workload = new ScheduleWorkload(creatorPlan!.meshId, creator, recipientPlan!.keys, history);
    workload.clients.push(creator);
    await creator.connect();
    for (let i = 0; i < cluster.nodeWs.length; i++) {
      const name = `chaos-witness-${i + 1}`;
      const witness = client(from(cluster, i), recipientPlan!, name);
      workload.clients.push(witness);
      witness.on('message', (message: Message & { scheduleId?: string; occurrence?: number }) => {
        if (typeof message.scheduleId !== 'string') return;
        history?.record({
          type: 'ok',
          f: 'schedule-fire',
          process: name,
          value: {
            mesh: workload.meshId,
            scheduleId: message.scheduleId,
            occurrence: Number(message.occurrence ?? 1),
            messageId: message.messageId,
          },
        });
        const ids = workload.fired.get(message.scheduleId) ?? new Set<string>();
        ids.add(message.messageId);
        workload.fired.set(message.scheduleId, ids);
      });
      await witness.connect();
    }
    return workload;
  }

  /**
   * Creates a schedule every ~1.5 s, each due 1–4 s later, until `untilMs` (so the last is due before the
   * run ends). A creation that fails is counted; one that timed out may still exist: verify.ts judges
   * every schedule the database has for the mesh, not just the confirmed ones.
   */
  async run(seed: number, untilMs: number, signal: AbortSignal): Promise<void> {
    const random = new Random(seed ^ 0x5c4ed);
    const started = Date.now();
    while (!signal.aborted && Date.now() - started < untilMs) {
      const at = Date.now() + random.int(1000, 4000);
      const value = { mesh: this.meshId, to: this.recipient.pubkey, at, once: true };
      const record = (type: 'invoke' | 'ok' | 'fail' | 'info', more: Record<string, unknown> = {}) =>
        this.history?.record({
          type,
          f: 'schedule-create',
          process: 'chaos-scheduler',
          value: { ...value, ...more },
        });
      record('invoke');
      try {
        const reply = await this.creator.request<Frame & { scheduleId: string }>({
          type: 'schedule.create',
          to: this.recipient.pubkey,
          body: `chaos ${this.created.size + 1}`,
          at,
        });
        this.created.set(reply.scheduleId, at);
        record('ok', { scheduleId: reply.scheduleId });
      } catch (error) {
        this.createFailures++;
        // A timeout may have created it after all (verify.ts judges the database's schedules).
        const code = (error as { code?: string }).code ?? 'error';
        record(INDETERMINATE.has(code) ? 'info' : 'fail', { error: code });
      }
      await sleep(random.int(1000, 2000), signal);
    }
  }

  close(): void {
    for (const c of this.clients) c.close();
  }
}

export interface TickRecord {
  tick: number;
  epoch: number;
  /** The observer's session moved (a welcome) since its previous tick: a repeat here is the tick in flight. */
  moved?: true;
}

export class ClockWorkload {
  /** Per observer (one per node, by the node it started on), every tick in arrival order. */
  readonly ticks = new Map<string, TickRecord[]>();
  private readonly clients: Client[] = [];
  setFailures = 0;

  private constructor(readonly meshId: string) {}

  /** Observers on every node, then the clock set to its top speed (retried: it must run for the check). */
  static async start(cluster: ChaosCluster, history?: Recorder): Promise<ClockWorkload> {
    const plans = await createLoadMeshes(
      { url: cluster.adminUrl, token: cluster.adminToken },
      { peers: Math.max(2, cluster.nodeWs.length), meshes: 1 },
    );
    const workload = new ClockWorkload(plans[0]!.meshId);
    for (let i = 0; i < cluster.nodeWs.length; i++) {
      const name = `observer@${cluster.nodeWs[i]!.id}`;
      const observer = client(from(cluster, i), plans[i]!, name);
      const ticks: TickRecord[] = [];
      workload.ticks.set(name, ticks);
      const mesh = workload.meshId;
      // The wire's ticks, not the SDK's (which drops a tick not after the last one): a clock written twice
      // (the plant clock-unfenced: every tick carries the row's epoch, so only their arrival order shows it)
      // would be hidden there. A repeat right after the observer moved is the tick in flight, from the node
      // it left and the one it joined: `moved` marks it, and the checks excuse it (docs/chaos.md).
      let moved = false;
      observer.on('welcome', () => {
        if (ticks.length > 0) moved = true;
      });
      observer.on('frame', (f: Frame) => {
        if (f.type !== 'clock.tick') return;
        const record: TickRecord = {
          tick: Number(f.tick),
          epoch: Number(f.epoch),
          ...(moved ? { moved: true } : {}),
        };
        moved = false;
        ticks.push(record);
        history?.record({
          type: 'ok',
          f: 'clock-tick',
          process: name,
          value: { mesh, ...record, observer: name },
        });
      });
      // Which node the observer is on and whether it resumed: a repeated tick is read against its moves.
      observer.on('welcome', (w: Welcome) =>
        history?.record({
          type: 'info',
          f: 'session-welcome',
          process: name,
          value: { mesh, node: w.node, resumed: w.resumed, observer: name },
        }),
      );
      workload.clients.push(observer);
      await observer.connect();
    }
    for (let attempt = 1; ; attempt++) {
      try {
        await workload.clients[0]!.request({ type: 'clock.set', speed: 100 });
        break;
      } catch (error) {
        workload.setFailures++;
        if (attempt >= 5) throw new Error(`could not start the clock: ${(error as Error).message}`);
        await sleep(500);
      }
    }
    return workload;
  }

  /** Pauses the clock (best effort: the check is over what was recorded) and closes the observers. */
  async close(): Promise<void> {
    await this.clients[0]?.request({ type: 'clock.pause' }, { timeoutMs: 3000 }).catch(() => {});
    for (const c of this.clients) c.close();
  }
}
