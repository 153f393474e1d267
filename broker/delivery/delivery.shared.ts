import type { Bus, Unsubscribe } from '../bus/bus.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import type { Logger } from '../log.js';
import { PeriodicTask } from '../timing/periodic.js';
import { type Delivery, wakeAll, wakeSessions } from './delivery.js';
import type { AcceptedMessage } from './records.js';
import type { MessageStore } from './store.js';

export interface SharedDeliveryOptions {
  connections: ConnectionRegistry;
  bus: Bus;
  store: MessageStore;
  nodeId: string;
  /** How often every session here is checked against its member's last seq (completeness, not order). */
  checkMs: number;
  /** One wake-up published, by channel (node: targeted; mesh: a broadcast). */
  published: (channel: 'node' | 'mesh') => void;
  log: Logger;
}

/**
 * Delivery to sessions on any node (flag `ha.delivery`). Postgres is the truth: the message and its rows
 * are committed before `dispatch`, and every session's feed reads its member's rows in seq order. Then:
 * - this node's sessions of the recipients are woken at once (never waiting on Redis);
 * - a wake-up is published, fire-and-forget, to the nodes that hold a session of a recipient (presence
 *   said which, in the accepting transaction), or for a broadcast to every node holding the mesh; the
 *   receiving node wakes its sessions (the delivery row's relay, in either mode);
 * - a lost wake-up costs latency, never order: the next wake-up of the member reveals the gap and the feed
 *   reads it; and every `checkMs` each node compares its sessions' feeds with their members' last seqs and
 *   wakes those behind (a lost wake-up of a member's last message);
 * - after the bus reconnects, and when the row turns shared, every session here is woken to read.
 */
export class SharedDelivery implements Delivery {
  private readonly checks: PeriodicTask;
  private detachReconnect: Unsubscribe | undefined;

  constructor(private readonly options: SharedDeliveryOptions) {
    this.checks = new PeriodicTask({
      everyMs: options.checkMs,
      run: () => this.checkOnce(),
      onError: { log: options.log, message: 'delivery check failed; the next one retries' },
    });
  }

  async activate(): Promise<void> {
    this.detachReconnect ??= this.options.bus.onReconnect(() => wakeAll(this.options.connections));
    this.checks.start();
    // Messages accepted while delivery was per node may be owed to sessions here.
    wakeAll(this.options.connections);
  }

  async deactivate(): Promise<void> {
    const inFlight = this.checks.stop();
    this.detachReconnect?.();
    this.detachReconnect = undefined;
    await inFlight;
  }

  async close(): Promise<void> {}

  dispatch(meshId: string, accepted: AcceptedMessage): void {
    const { bus, connections, nodeId, published } = this.options;
    wakeSessions(connections, accepted, 'local');
    const wake = { frame: accepted.frame, seqs: accepted.seqs, publishedAt: Date.now() };
    if (accepted.nodes === undefined) {
      published('mesh');
      void bus.publishToMesh(meshId, 'delivery.wake', wake);
      return;
    }
    for (const node of accepted.nodes) {
      if (node === nodeId) continue;
      published('node');
      void bus.publishToNode(node, 'delivery.wake', wake);
    }
  }

  /** One check at a time: each session behind its member's last seq is woken to read. */
  check(): Promise<void> {
    return this.checks.runNow();
  }

  private async checkOnce(): Promise<void> {
    const { connections, store } = this.options;
    const last = await store.lastSeqs(connections.memberIds());
    for (const [memberId, lastSeq] of last) {
      for (const connection of connections.ofMember(memberId)) {
        if (connection.feed?.behind(lastSeq)) connection.feed.wake();
      }
    }
  }
}
