import type { ConnectionRegistry } from '../connections/registry.js';
import { type Delivery, wakeSessions } from './delivery.js';
import type { AcceptedMessage } from './records.js';

/**
 * This node's sessions only. The gap on 2+ nodes: a recipient connected to another node gets nothing
 * until its session reconnects here (or anywhere, which replays its backlog); broadcasts reach only the
 * sessions of this node.
 */
export class LocalDelivery implements Delivery {
  constructor(private readonly connections: ConnectionRegistry) {}

  async activate(): Promise<void> {}

  async deactivate(): Promise<void> {}

  async close(): Promise<void> {}

  dispatch(_meshId: string, accepted: AcceptedMessage): void {
    wakeSessions(this.connections, accepted, 'local');
  }
}
