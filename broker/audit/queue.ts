import type { Logger } from '../log.js';
import type { AuditEntry } from './audit.js';

interface MeshQueue {
  pending: AuditEntry[];
  running: Promise<void> | undefined;
}

/** Entries of one mesh written together at most (one INSERT). */
const BATCH = 500;
const RETRIES = 5;
const RETRY_DELAY_MS = 500;

export interface AuditCounters {
  appended(count: number): void;
  failed(count: number): void;
}

/**
 * The ordering and batching shared by every audit writer: one queue per mesh, drained in order, each
 * drain writing everything pending (up to a batch) at once; a failed write is retried, then dropped,
 * logged and counted. Writers supply only how a batch is appended.
 */
export class AuditQueues {
  private readonly queues = new Map<string, MeshQueue>();

  constructor(
    private readonly write: (meshId: string, batch: AuditEntry[]) => Promise<void>,
    private readonly log: Logger,
    private readonly counters: AuditCounters,
    /** Called after a failed write (the writer may have to forget what it cached). */
    private readonly onFailure: (meshId: string) => void = () => {},
  ) {}

  push(entry: AuditEntry): void {
    let queue = this.queues.get(entry.meshId);
    if (!queue) {
      queue = { pending: [], running: undefined };
      this.queues.set(entry.meshId, queue);
    }
    queue.pending.push(entry);
    queue.running ??= this.drain(entry.meshId, queue);
  }

  async flush(meshId?: string): Promise<void> {
    const queues = meshId === undefined ? [...this.queues.values()] : [this.queues.get(meshId)];
    for (const queue of queues) while (queue?.running) await queue.running;
  }

  /** Writes each entry of a failed batch on its own; returns how many still failed. */
  private async writeOneByOne(meshId: string, batch: AuditEntry[]): Promise<number> {
    let failed = 0;
    for (const entry of batch) {
      try {
        await this.write(meshId, [entry]);
      } catch {
        this.onFailure(meshId);
        failed++;
      }
    }
    return failed;
  }

  private async drain(meshId: string, queue: MeshQueue): Promise<void> {
    let attempt = 0;
    while (queue.pending.length > 0) {
      const batch = queue.pending.slice(0, BATCH);
      try {
        await this.write(meshId, batch);
        queue.pending.splice(0, batch.length);
        this.counters.appended(batch.length);
        attempt = 0;
      } catch (error) {
        this.onFailure(meshId);
        if (++attempt > RETRIES) {
          // Give up on the batch, but not on its good entries: one bad entry must not take the others.
          const dropped = await this.writeOneByOne(meshId, batch);
          this.log.error({ err: error, meshId, dropped }, 'audit append failed; entries dropped');
          this.counters.failed(dropped);
          this.counters.appended(batch.length - dropped);
          queue.pending.splice(0, batch.length);
          attempt = 0;
        } else {
          await new Promise((resolve) => setTimeout(resolve, RETRY_DELAY_MS * attempt));
        }
      }
    }
    queue.running = undefined;
    if (queue.pending.length === 0) this.queues.delete(meshId);
  }
}
