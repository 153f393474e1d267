import type { DurableFrame } from '../connections/connection.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import { type Delivery, deliverToSessions } from './delivery.js';

/**
 * This node's sockets only. The gap on 2+ nodes: a recipient connected to another node gets nothing
 * until its session reconnects here (or anywhere, which replays its backlog); broadcasts reach only the
 * sessions of this node.
 */
export class LocalDelivery implements Delivery {
  constructor(
    private readonly connections: ConnectionRegistry,
    private readonly delivered: (path: 'local', count: number) => void,
  ) {}

  async activate(): Promise<void> {}

  async deactivate(): Promise<void> {}

  async close(): Promise<void> {}

  async dispatch(_meshId: string, message: DurableFrame, recipients: number[]): Promise<void> {
    const count = deliverToSessions(this.connections, message, recipients);
    if (count > 0) this.delivered('local', count);
  }
}
