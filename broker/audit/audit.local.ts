import type { Pool } from '../db/pool.js';
import type { Logger } from '../log.js';
import type { AuditEntry, AuditLog } from './audit.js';
import { type AuditCounters, AuditQueues } from './queue.js';
import { type ChainHead, insertAfter, readHead } from './records.js';

/**
 * The single-node audit writer: the chain head of each mesh is cached in this node's memory after the
 * first read, as the original broker did. The gap on 2+ nodes: each node extends its own cached head,
 * so two nodes appending to the same mesh write two rows with the same seq and prevHash — a fork that
 * `workbench audit verify` reports.
 */
export class LocalAuditLog implements AuditLog {
  private readonly heads = new Map<string, ChainHead>();
  private readonly queues: AuditQueues;

  constructor(
    private readonly pool: Pool,
    log: Logger,
    counters: AuditCounters,
  ) {
    this.queues = new AuditQueues(
      (meshId, batch) => this.write(meshId, batch),
      log,
      counters,
      (meshId) => this.heads.delete(meshId),
    );
  }

  record(entry: AuditEntry): void {
    this.queues.push(entry);
  }

  flush(meshId?: string): Promise<void> {
    return this.queues.flush(meshId);
  }

  /** Forgets the cached heads: another writer may have appended meanwhile, so heads are read again. */
  async activate(): Promise<void> {
    this.heads.clear();
  }

  /** Everything queued is written before another writer appends. */
  async deactivate(): Promise<void> {
    await this.flush();
  }

  async close(): Promise<void> {
    await this.flush();
  }

  private async write(meshId: string, batch: AuditEntry[]): Promise<void> {
    const head = this.heads.get(meshId) ?? (await readHead(this.pool, meshId));
    this.heads.set(meshId, await insertAfter(this.pool, meshId, head, batch));
  }
}
