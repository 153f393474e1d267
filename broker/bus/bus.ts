/**
 * Redis pub/sub between the nodes of a cluster. A hint, never the truth (docs/design.md §2): a message can be lost
 * on any disconnect, so every shared module that must not lose anything writes Postgres first and has a
 * read (a feed, a reaper, a poll) that completes what the bus missed.
 *
 * Two kinds of channel, each multiplexing message kinds:
 * - a mesh channel, which a node subscribes to while it holds sessions of the mesh (fan-out to the nodes
 *   that care: deliveries, presence events, stream data, clock ticks);
 * - a node channel, which each node always subscribes to (requests to one node: MCP calls, kicks).
 * A node never handles its own publications (they carry its id). Publishing never waits for Redis to come
 * back: with Redis down it returns false at once, counted in `mesh_broker_bus_publish_failures_total`.
 * On a Redis Cluster the channels are sharded (redis/pubsub.ts): each one lives on the master that owns its
 * slot, so the meshes' traffic spreads over the masters (docs/redis-cluster.md).
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from '../log.js';
import type { PubSub } from '../redis/pubsub.js';
import { type BusKeys, type OpenFailure, open, seal } from './envelope.js';
import type { BusHandler, BusKind, BusMessage, BusPayloads, BusRelay } from './messages.js';
import { type ChannelType, checkPayload } from './payload-schemas.js';
import { ReplayGuard } from './replay-guard.js';

/** Detaches what was attached. */
export type Unsubscribe = () => void;

/** Why a received envelope was dropped (the `reason` of mesh_broker_bus_rejected_total). */
export type RejectReason = OpenFailure | 'replayed' | 'kind_not_allowed' | 'bad_payload';

export const REJECT_REASONS: readonly RejectReason[] = [
  'bad_json',
  'unsigned',
  'unknown_version',
  'bad_mac',
  'stale',
  'replayed',
  'kind_not_allowed',
  'bad_payload',
];

export interface BusOptions {
  /** Publishing over the node's main client (no offline queue), listening on a dedicated connection. */
  pubsub: PubSub;
  prefix: string;
  nodeId: string;
  /** BUS_SECRET (and BUS_SECRET_PREVIOUS during a rotation): every envelope is sealed and opened with them. */
  keys: BusKeys;
  log: Logger;
  onPublishFailure: () => void;
  /** An envelope dropped on receipt: nothing of it reached a handler. */
  onRejected: (reason: RejectReason) => void;
}

export class Bus {
  private readonly handlers = new Map<BusKind, Set<BusHandler<never>>>();
  /** Mesh channels wanted by this node, with how many local reasons each has (ref count). */
  private readonly meshes = new Map<string, number>();
  private readonly reconnectListeners = new Set<() => void>();
  private wasReady = false;
  /** This process's stamp (bus/replay-guard.ts): a boot of its own, and a count of envelopes sealed. */
  private readonly boot = randomBytes(8).toString('hex');
  private sealed = 0;
  private readonly replays = new ReplayGuard();

  constructor(private readonly options: BusOptions) {
    options.pubsub.onMessage((channel, text) => this.receive(channel, text));
    options.pubsub.onResubscribed(() => {
      // After a reconnect, whatever was published meanwhile is lost: modules run their catch-up.
      if (this.wasReady) for (const listener of this.reconnectListeners) listener();
      this.wasReady = true;
    });
  }

  async start(): Promise<void> {
    await this.options.pubsub.subscribe(this.nodeChannel(this.options.nodeId)).catch((error) => {
      this.options.log.warn({ err: error }, 'bus: could not subscribe the node channel yet');
    });
  }

  /**
   * Handles messages of `kind` from any channel; `scope` is the mesh id or the node id the channel is for.
   * Implementations attach when they activate and call the returned function when they deactivate.
   */
  on<K extends BusKind>(kind: K, handler: BusHandler<K>): Unsubscribe {
    const handlers = this.handlers.get(kind) ?? new Set();
    this.handlers.set(kind, handlers);
    handlers.add(handler as BusHandler<never>);
    return () => handlers.delete(handler as BusHandler<never>);
  }

  /** `on` for a row's relay. */
  relay(relay: BusRelay): Unsubscribe {
    return this.on(relay.kind, relay.handle as BusHandler<typeof relay.kind>);
  }

  /** Called after the subscriber reconnected (messages may have been missed). */
  onReconnect(listener: () => void): Unsubscribe {
    this.reconnectListeners.add(listener);
    return () => this.reconnectListeners.delete(listener);
  }

  /** This node wants the mesh's channel (ref-counted with `leaveMesh`). */
  joinMesh(meshId: string): void {
    const count = this.meshes.get(meshId) ?? 0;
    this.meshes.set(meshId, count + 1);
    if (count === 0) {
      this.options.pubsub.subscribe(this.meshChannel(meshId)).catch((error) => {
        this.options.log.warn(
          { err: error, meshId },
          'bus: mesh subscribe failed (the periodic delivery check covers it)',
        );
      });
    }
  }

  leaveMesh(meshId: string): void {
    const count = this.meshes.get(meshId) ?? 0;
    if (count <= 1) {
      this.meshes.delete(meshId);
      this.options.pubsub.unsubscribe(this.meshChannel(meshId)).catch(() => {});
    } else {
      this.meshes.set(meshId, count - 1);
    }
  }

  publishToMesh<K extends BusKind>(meshId: string, kind: K, payload: BusPayloads[K]): Promise<boolean> {
    return this.publish(this.meshChannel(meshId), { kind, payload } as BusMessage);
  }

  publishToNode<K extends BusKind>(nodeId: string, kind: K, payload: BusPayloads[K]): Promise<boolean> {
    return this.publish(this.nodeChannel(nodeId), { kind, payload } as BusMessage);
  }

  /** The connections are the infrastructure's, closed there. */
  async close(): Promise<void> {}

  private meshChannel(meshId: string): string {
    return `${this.options.prefix}bus:mesh:${meshId}`;
  }

  private nodeChannel(nodeId: string): string {
    return `${this.options.prefix}bus:node:${nodeId}`;
  }

  private async publish(channel: string, message: BusMessage): Promise<boolean> {
    const { kind } = message;
    const stamp = { boot: this.boot, n: ++this.sealed };
    const text = seal(this.options.keys, channel, { from: this.options.nodeId, stamp, ...message });
    try {
      await this.options.pubsub.publish(channel, text);
      return true;
    } catch (error) {
      this.options.onPublishFailure();
      this.options.log.debug({ err: error, channel, kind }, 'bus publish failed');
      return false;
    }
  }

  /** `mesh` or `node` for one of this cluster's bus channels, undefined for any other channel. */
  private channelType(channel: string): ChannelType | undefined {
    const start = `${this.options.prefix}bus:`;
    if (!channel.startsWith(start)) return undefined;
    const type = channel.slice(start.length, channel.indexOf(':', start.length));
    return type === 'mesh' || type === 'node' ? type : undefined;
  }

  /**
   * Only a verified envelope of a kind its channel type carries, with a payload of its kind's shape, reaches
   * a handler: anything else is dropped and counted, whoever published it.
   */
  private receive(channel: string, text: string): void {
    const type = this.channelType(channel);
    if (type === undefined) return; // another listener's channel (the flag refresh push)
    const opened = open(this.options.keys, channel, text);
    if (!opened.ok) {
      this.reject(opened.reason, channel);
      return;
    }
    const { envelope } = opened;
    if (envelope.from === this.options.nodeId) return;
    if (!this.replays.admit(channel, envelope.from, envelope.stamp)) {
      this.reject('replayed', channel, envelope.kind);
      return;
    }
    const checked = checkPayload(type, envelope.kind, envelope.payload);
    if (!checked.ok) {
      this.reject(checked.reason, channel, envelope.kind);
      return;
    }
    const scope = channel.slice(channel.lastIndexOf(':') + 1);
    for (const handler of this.handlers.get(checked.kind) ?? []) {
      try {
        (handler as BusHandler<BusKind>)(scope, checked.payload as never);
      } catch (error) {
        this.options.log.error({ err: error, kind: checked.kind }, 'bus handler failed');
      }
    }
  }

  private reject(reason: RejectReason, channel: string, kind?: string): void {
    this.options.onRejected(reason);
    // Debug only: a flood of forgeries must not become a flood of log lines (the counter shows it).
    this.options.log.debug({ reason, channel, kind: kind?.slice(0, 64) }, 'bus envelope rejected');
  }
}
