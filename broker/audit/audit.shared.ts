import type { Pool, PoolClient } from '../db/pool.js';
import { inTransaction } from '../db/pool.js';
import type { Logger } from '../log.js';
import type { AuditEntry, AuditLog } from './audit.js';
import { type AuditCounters, AuditQueues } from './queue.js';
import { insertAfter, readHead } from './records.js';

/**
 * Appends a batch to a mesh's chain under a transaction-scoped advisory lock on the mesh's chain, reading
 * the head inside the lock: whoever writes (any node, the CLI), appends are serialized and the chain
 * never forks. Several pending entries of a mesh share one transaction.
 */
export async function appendSerialized(pool: Pool, meshId: string, batch: AuditEntry[]): Promise<void> {
  await inTransaction(pool, (client) => appendInTransaction(client, meshId, batch));
}

/** The same, inside a transaction the caller owns (so the entries commit with the caller's writes). */
export async function appendInTransaction(
  client: PoolClient,
  meshId: string,
  batch: AuditEntry[],
): Promise<void> {
  await client.query("SELECT pg_advisory_xact_lock(hashtextextended('audit:' || $1, 0))", [meshId]);
  await insertAfter(client, meshId, await readHead(client, meshId), batch);
}

/**
 * The shared audit writer (flag `ha.audit`): no cached head; every batch is appended by
 * `appendSerialized`. Correct with any number of nodes, and with nodes still on the local writer only
 * as long as those do not append to the same mesh (mixed clusters are the flip window: see docs/).
 */
export class SharedAuditLog implements AuditLog {
  private readonly queues: AuditQueues;

  constructor(pool: Pool, log: Logger, counters: AuditCounters) {
    this.queues = new AuditQueues((meshId, batch) => appendSerialized(pool, meshId, batch), log, counters);
  }

  record(entry: AuditEntry): void {
    this.queues.push(entry);
  }

  flush(meshId?: string): Promise<void> {
    return this.queues.flush(meshId);
  }

  async activate(): Promise<void> {}

  /** Everything queued is written before another writer appends. */
  async deactivate(): Promise<void> {
    await this.flush();
  }

  async close(): Promise<void> {
    await this.flush();
  }
}
