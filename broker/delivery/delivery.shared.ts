import type { Bus, Unsubscribe } from '../bus/bus.js';
import type { Connection, DurableFrame } from '../connections/connection.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import type { Logger } from '../log.js';
import { type Delivery, deliverToSessions } from './delivery.js';
import type { MessageStore } from './store.js';

export interface SharedDeliveryOptions {
  connections: ConnectionRegistry;
  bus: Bus;
  store: MessageStore;
  /** How often the sweep re-offers what is still owed to this node's sessions. */
  sweepMs: number;
  /** A message is left to the live path this long before the sweep considers it. */
  sweepMinAgeMs: number;
  delivered: (path: 'local' | 'sweep', count: number) => void;
  log: Logger;
}

/**
 * Delivery to sessions on any node (flag `ha.delivery`). Postgres is the truth: the message and its
 * delivery rows are committed before `dispatch`. Then:
 * - this node's sessions of the recipients get it at once (never waiting on Redis);
 * - the other nodes holding sessions of the mesh get it over the bus (mesh channel) and deliver it to
 *   their own sessions of the recipients;
 * - every `sweepMs`, each node re-offers to its sessions what their members still owe (unacked, older
 *   than `sweepMinAgeMs`) and that socket was not already sent: a lost wake-up costs at most
 *   sweepMinAgeMs + sweepMs, and with Redis down delivery runs on the sweep alone. The SDK drops repeats.
 * - after the bus reconnects, and when the row turns shared, every session here catches up in order: live
 *   messages wait while what its member is owed is replayed oldest first (what was published while this
 *   node was not listening, or accepted while delivery was per node, comes before anything newer).
 * Order: the live paths keep a sender's order; a message that only the periodic sweep delivers (its
 * wake-up lost without this node noticing) can still arrive after later ones of the same sender.
 */
export class SharedDelivery implements Delivery {
  private sweeper: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;
  private detachReconnect: Unsubscribe | undefined;

  constructor(private readonly options: SharedDeliveryOptions) {}

  /** Starts the sweep and the catch-up after bus reconnects (the row went shared, or the node booted). */
  async activate(): Promise<void> {
    this.detachReconnect ??= this.options.bus.onReconnect(() => this.catchUpAll());
    this.sweeper ??= setInterval(() => void this.sweep(), this.options.sweepMs);
    this.sweeper.unref();
    // Messages accepted while delivery was per node may be owed here: they go first.
    this.catchUpAll();
  }

  /**
   * Every session of this node gets what its member is owed, oldest first, before any live message that
   * arrives from now on. The catch-up begins for all of them synchronously (before the bus hands over a
   * newer message); a session already catching up (it just said hello) is left to its own replay.
   */
  private catchUpAll(): void {
    const { connections } = this.options;
    for (const memberId of connections.memberIds()) {
      for (const connection of connections.ofMember(memberId)) {
        if (connection.catchingUpNow) continue;
        connection.beginCatchUp();
        void this.replayOwed(connection, memberId);
      }
    }
  }

  private async replayOwed(connection: Connection, memberId: number): Promise<void> {
    let count = 0;
    try {
      for await (const message of this.options.store.pending(memberId)) {
        if (!connection.isOpen) return;
        if (connection.hasDelivered(message.messageId)) continue;
        connection.replay(message);
        count++;
      }
    } catch (error) {
      this.options.log.warn({ err: error }, 'catch-up failed; the sweep re-offers what is owed');
    } finally {
      connection.endCatchUp();
      if (count > 0) this.options.delivered('sweep', count);
    }
  }

  /** Stops the sweep (the row went back to local); remote deliveries are still handed to local sockets. */
  async deactivate(): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = undefined;
    this.detachReconnect?.();
    this.detachReconnect = undefined;
    await this.sweeping;
  }

  async close(): Promise<void> {}

  async dispatch(meshId: string, message: DurableFrame, recipients: number[]): Promise<void> {
    const count = deliverToSessions(this.options.connections, message, recipients);
    if (count > 0) this.options.delivered('local', count);
    // publishedAt: when this node handed it on, so the receiving node can measure the fan-out latency.
    await this.options.bus.publishToMesh(meshId, 'delivery.message', {
      frame: message,
      recipients,
      publishedAt: Date.now(),
    });
  }

  /** One sweep at a time; a sweep asked for while one runs is skipped (the next tick comes soon). */
  sweep(): Promise<void> {
    this.sweeping ??= this.sweepOnce().finally(() => {
      this.sweeping = undefined;
    });
    return this.sweeping;
  }

  private async sweepOnce(): Promise<void> {
    const { connections, store, sweepMinAgeMs } = this.options;
    try {
      const owed = await store.owedTo(connections.memberIds(), sweepMinAgeMs);
      let count = 0;
      for (const { memberId, frame } of owed) {
        for (const connection of connections.ofMember(memberId)) {
          if (connection.hasDelivered(frame.messageId)) continue;
          connection.deliver(frame);
          count++;
        }
      }
      if (count > 0) this.options.delivered('sweep', count);
    } catch (error) {
      this.options.log.warn({ err: error }, 'delivery sweep failed; the next one retries');
    }
  }
}
