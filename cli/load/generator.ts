/**
 * The traffic of `workbench load`: N SDK peers (MeshClient, as real peers), every one subscribed to its
 * mesh's `load` stream, issuing DMs, broadcasts (`to: "*"`) and stream publishes at the asked rates
 * (messages per second over all peers). Each peer keeps ONE request in flight, so its seqs are issued in
 * the order the broker sees them, which is what makes the checker's order rule sound. Bounded in time
 * (`durationMs`) and count (`maxMessages`); then a bounded drain waits for what is still owed.
 * With a `history`, every send, delivery, ack, stream publish and receive is recorded as it happens
 * (cli/history/format.ts; each peer is the process `load-N`).
 */
import { performance } from 'node:perf_hooks';
import { MeshClient, MeshRequestError, type StreamMessage } from '@mesh-broker/sdk';
import type { Frame, Message, Sent } from '../../protocol/frames.js';
import type { Recorder } from '../history/writer.js';
import type { Channel, DeliveryChecker, Kind } from './checker.js';
import type { LoadPeerPlan } from './setup.js';

export const LOAD_STREAM = 'load';

export interface GeneratorOptions {
  wsUrls: string[];
  plans: LoadPeerPlan[];
  /** Messages per second over all peers, per kind. */
  rates: Record<Kind, number>;
  durationMs: number;
  maxMessages: number;
  drainMs: number;
  /** Stops issuing early (Ctrl-C); the drain and the report still happen. */
  signal?: AbortSignal;
  /** Where every operation is recorded (`--history`). */
  history?: Recorder;
  /**
   * Whether stream frames go to the delivery checker (default yes). Chaos says no: streams are at most
   * once by design, so a frame lost with a fault is no loss; the history's stream checker judges them.
   */
  judgeStreams?: boolean;
  /**
   * The group of `group` sends (`to: "@<group>"`): every other peer of each mesh joins it at its hello,
   * and a group send is owed to every other member of the sender's mesh in it. Default `load`.
   */
  group?: string;
  /** The SDK's dedup (default on); off only for the chaos plant `sdk-dedup-off` (broker/plants.ts). */
  dedup?: boolean;
  /**
   * Each message is acked this long after it arrived, as an application acks after its work (default: at
   * once, by the SDK). Chaos sets it: a session that moves then has messages written to it but not acked,
   * which its next node replays and the SDK must drop.
   */
  ackDelayMs?: number;
}

export interface GeneratorFacts {
  durationMs: number;
  drainMs: number;
  refused: Record<string, number>;
  droppedBySdk: number;
  /** Requests the broker accepted, by kind (stream publishes too, judged by the delivery checker or not). */
  accepted: Record<Kind, number>;
}

interface LoadPeer {
  plan: LoadPeerPlan;
  client: MeshClient;
  /** Records a stream publish the peer's subscription handed over. */
  onStreamData: (data: StreamMessage) => void;
  busy: boolean;
  seq: Record<Channel, number>;
  /** The other peers of its mesh: DM targets, broadcast and stream recipients. */
  others: string[];
  /** The other peers of its mesh in the group: a group send's recipients. */
  groupOthers: string[];
}

const CONNECT_CONCURRENCY = 32;
const CONNECT_TIMEOUT_MS = 15_000;
const REQUEST_TIMEOUT_MS = 10_000;
const TICK_MS = 5;

/** `promise`, or a rejection after `ms` (the timer is cleared either way, so it never holds the process). */
async function timeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expiry = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, expiry]);
  } finally {
    clearTimeout(timer);
  }
}

/** Connects every peer (peer i starts on URL i mod K, falling back to the others) and subscribes it. */
async function connectPeers(
  options: GeneratorOptions,
  checker: DeliveryChecker,
  counters: { dropped: number },
) {
  const byMesh = new Map<string, string[]>();
  const groupByMesh = new Map<string, string[]>();
  // Every other peer of each mesh (its 1st, 3rd, …) is in the group.
  const members = new Set<string>();
  for (const plan of options.plans) {
    byMesh.set(plan.meshId, [...(byMesh.get(plan.meshId) ?? []), plan.keys.pubkey]);
    if (byMesh.get(plan.meshId)!.length % 2 === 1) members.add(plan.keys.pubkey);
  }
  const inGroup = (plan: LoadPeerPlan) => members.has(plan.keys.pubkey);
  for (const plan of options.plans) {
    if (inGroup(plan))
      groupByMesh.set(plan.meshId, [...(groupByMesh.get(plan.meshId) ?? []), plan.keys.pubkey]);
  }
  const group = groupOf(options);
  const peers: LoadPeer[] = options.plans.map((plan) => {
    const k = options.wsUrls.length;
    const urls = Array.from({ length: k }, (_, j) => options.wsUrls[(plan.index + j) % k]!);
    const client = new MeshClient({
      urls,
      meshId: plan.meshId,
      keys: plan.keys,
      name: `load-${plan.index + 1}`,
      ...(inGroup(plan) ? { groups: [group] } : {}),
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      backoff: { initialMs: 100, maxMs: 2000 },
      ...(options.dedup === false ? { dedup: false } : {}),
      ...(options.ackDelayMs ? { autoAck: false } : {}),
    });
    const me = plan.keys.pubkey;
    const process = processOf(plan);
    const history = options.history;
    client.on('message', (m: Message) => {
      const seq = parseSeq(m.body);
      if (seq === undefined) return;
      checker.receive({ recipient: me, sender: m.from, channel: 'message', seq, at: performance.now() });
      history?.record({
        type: 'ok',
        f: 'deliver',
        process,
        value: { mesh: plan.meshId, recipient: me, from: m.from, seq, messageId: m.messageId },
      });
    });
    // Repeats the SDK filters by messageId: redeliveries (resume, sweep), counted for the report only.
    const raw = new Set<string>();
    client.on('frame', (f: Frame) => {
      if (f.type === 'message') {
        if (raw.has(String(f.messageId))) counters.dropped++;
        else raw.add(String(f.messageId));
        // The SDK acks every message frame (duplicates too) right after its listeners: recorded after them.
        // With a delay, the ack is ours, of every frame as the SDK's would be, and recorded when written.
        const messageId = String(f.messageId);
        const acked = () =>
          history?.record({ type: 'info', f: 'ack', process, value: { recipient: me, messageId } });
        if (options.ackDelayMs) {
          // Bounded: it fires within ackDelayMs of the frame, long before the chaos run closes its history.
          setTimeout(() => {
            client.ack(messageId);
            acked();
          }, options.ackDelayMs).unref();
        } else if (history) queueMicrotask(acked);
      }
    });
    // What the application sees of the stream: the SDK's subscription, which drops a publish it already
    // handed over (same epoch, offset not past the last: a session moving between nodes can get the publish
    // in flight from both), as the messages above are after its dedup. Subscribed at connect (connectAll).
    const onStreamData = (f: StreamMessage) => {
      const seq = (f.data as { q?: unknown } | null)?.q;
      if (typeof seq !== 'number') return;
      if (options.judgeStreams !== false)
        checker.receive({
          recipient: me,
          sender: String(f.from),
          channel: 'stream',
          seq,
          at: performance.now(),
        });
      history?.record({
        type: 'ok',
        f: 'stream-receive',
        process,
        value: { mesh: plan.meshId, stream: LOAD_STREAM, publisher: String(f.from), seq, subscriber: me },
      });
    };
    return {
      plan,
      client,
      onStreamData,
      busy: false,
      seq: { message: 0, stream: 0 },
      others: byMesh.get(plan.meshId)!.filter((p) => p !== me),
      groupOthers: (groupByMesh.get(plan.meshId) ?? []).filter((p) => p !== me),
    };
  });
  let next = 0;
  const worker = async () => {
    while (next < peers.length) {
      const peer = peers[next++]!;
      await timeout(peer.client.connect(), CONNECT_TIMEOUT_MS, `peer ${peer.plan.index + 1} connect`);
      if (options.rates.stream > 0) {
        const subscription = peer.client.streams.subscribe(LOAD_STREAM);
        subscription.on('data', peer.onStreamData);
        await subscription.ready;
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(CONNECT_CONCURRENCY, peers.length) }, worker));
  } catch (error) {
    for (const peer of peers) peer.client.close();
    throw error;
  }
  return peers;
}

const processOf = (plan: LoadPeerPlan) => `load-${plan.index + 1}`;
const groupOf = (options: GeneratorOptions) => options.group ?? 'load';

/**
 * A refusal is a `fail` (it did not happen); a timeout, a connection closed before the reply or an
 * `internal` error (the node failed mid-way, maybe after its commit) an `info` (it may have).
 */
export const INDETERMINATE = new Set(['timeout', 'disconnected', 'internal', 'error']);
function outcome(error: unknown): { type: 'fail' | 'info'; reason: string } {
  const reason = error instanceof MeshRequestError ? error.code : 'error';
  return { type: INDETERMINATE.has(reason) ? 'info' : 'fail', reason };
}

function parseSeq(body: string): number | undefined {
  try {
    const q = (JSON.parse(body) as { q?: unknown }).q;
    return typeof q === 'number' ? q : undefined;
  } catch {
    return undefined; // not one of ours
  }
}

export async function generateLoad(
  options: GeneratorOptions,
  checker: DeliveryChecker,
): Promise<GeneratorFacts> {
  const counters = { dropped: 0 };
  const refused: Record<string, number> = {};
  const peers = await connectPeers(options, checker, counters).catch((error) => {
    throw new Error(`could not connect the peers: ${(error as Error).message}`);
  });
  try {
    const kinds = (['dm', 'broadcast', 'group', 'stream'] as const).filter((k) => options.rates[k] > 0);
    const issued: Record<Kind, number> = { dm: 0, broadcast: 0, group: 0, stream: 0 };
    const accepted: Record<Kind, number> = { dm: 0, broadcast: 0, group: 0, stream: 0 };
    const inFlight = new Set<Promise<void>>();
    let total = 0;
    let cursor = 0;
    const freePeer = () => {
      for (let i = 0; i < peers.length; i++) {
        const peer = peers[(cursor + i) % peers.length]!;
        if (!peer.busy && peer.client.connected) {
          cursor = (cursor + i + 1) % peers.length;
          return peer;
        }
      }
      return undefined;
    };
    const issue = (peer: LoadPeer, kind: Kind) => {
      const channel: Channel = kind === 'stream' ? 'stream' : 'message';
      const seq = peer.seq[channel]++;
      peer.busy = true;
      const sender = peer.plan.keys.pubkey;
      const target = peer.others[Math.floor(Math.random() * peer.others.length)]!;
      const sentAt = performance.now();
      const recipients = kind === 'dm' ? [target] : kind === 'group' ? peer.groupOthers : peer.others;
      const to = kind === 'dm' ? target : kind === 'group' ? `@${groupOf(options)}` : '*';
      const id = `load-${sender.slice(0, 16)}-${seq}`;
      const f = kind === 'stream' ? 'stream-publish' : 'send';
      const value =
        kind === 'stream'
          ? { mesh: peer.plan.meshId, stream: LOAD_STREAM, publisher: sender, seq }
          : { mesh: peer.plan.meshId, kind, from: sender, to: recipients, id, seq };
      const process = processOf(peer.plan);
      options.history?.record({ type: 'invoke', f, process, value });
      const request =
        kind === 'stream'
          ? peer.client.request({ type: 'stream.publish', stream: LOAD_STREAM, data: { q: seq } })
          : peer.client.send(to, JSON.stringify({ q: seq, k: kind }), { id });
      const done: Promise<void> = request.then(
        (reply) => {
          const messageId = (reply as Partial<Sent>).messageId;
          options.history?.record({ type: 'ok', f, process, value: { ...value, messageId } });
          accepted[kind]++;
          if (kind !== 'stream' || options.judgeStreams !== false)
            checker.accept({ sender, kind, seq, sentAt, recipients });
        },
        (error) => {
          const { type, reason } = outcome(error);
          options.history?.record({ type, f, process, value: { ...value, error: reason } });
          refused[reason] = (refused[reason] ?? 0) + 1;
        },
      );
      const settled = done.finally(() => {
        peer.busy = false;
        inFlight.delete(settled);
      });
      inFlight.add(settled);
    };

    const started = performance.now();
    await new Promise<void>((resolve) => {
      const timer = setInterval(() => {
        const elapsed = performance.now() - started;
        if (elapsed >= options.durationMs || total >= options.maxMessages || options.signal?.aborted) {
          clearInterval(timer);
          resolve();
          return;
        }
        let progress = true;
        while (progress && total < options.maxMessages) {
          progress = false;
          for (const kind of kinds) {
            if (issued[kind] >= Math.floor((options.rates[kind] * elapsed) / 1000)) continue;
            if (total >= options.maxMessages) break;
            const peer = freePeer();
            if (!peer) return; // every peer busy: the offered rate is above what the target takes
            issue(peer, kind);
            issued[kind]++;
            total++;
            progress = true;
          }
        }
      }, TICK_MS);
    });
    const durationMs = performance.now() - started;
    // Requests still out get their answer or their timeout (bounded by REQUEST_TIMEOUT_MS).
    await Promise.all([...inFlight]);
    const drainStarted = performance.now();
    while (checker.outstanding() > 0 && performance.now() - drainStarted < options.drainMs)
      await new Promise((resolve) => setTimeout(resolve, 20));
    return {
      durationMs,
      drainMs: performance.now() - drainStarted,
      refused,
      droppedBySdk: counters.dropped,
      accepted,
    };
  } finally {
    for (const peer of peers) peer.client.close();
  }
}
