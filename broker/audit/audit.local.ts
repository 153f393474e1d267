import type { Pool } from '../db/pool.js';
import type { Logger } from '../log.js';
import type { AuditEntry, AuditLog } from './audit.js';
import { auditHash, GENESIS } from './chain.js';

interface Head {
  seq: number;
  hash: string;
}

interface MeshQueue {
  pending: AuditEntry[];
  running: Promise<void> | undefined;
}

/** Entries of one mesh written in one INSERT at most. */
const BATCH = 500;
const RETRIES = 5;
const RETRY_DELAY_MS = 500;

export interface AuditCounters {
  appended(count: number): void;
  failed(count: number): void;
}

/**
 * The single-node audit writer: the chain head of each mesh is cached in this node's memory after the
 * first read, as the original broker did. Appends of one node are ordered (one queue per mesh, batched
 * into one INSERT), so one node never forks a chain. The gap on 2+ nodes: each node extends its own
 * cached head, so two nodes appending to the same mesh write two rows with the same seq and prevHash —
 * a fork that `workbench audit verify` reports.
 */
export class LocalAuditLog implements AuditLog {
  private readonly heads = new Map<string, Head>();
  private readonly queues = new Map<string, MeshQueue>();

  constructor(
    private readonly pool: Pool,
    private readonly log: Logger,
    private readonly counters: AuditCounters,
  ) {}

  record(entry: AuditEntry): void {
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

  async close(): Promise<void> {
    await this.flush();
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
        this.heads.delete(meshId); // re-read the head: the failed write may or may not have landed
        if (++attempt > RETRIES) {
          this.log.error(
            { err: error, meshId, dropped: batch.length },
            'audit append failed; entries dropped',
          );
          this.counters.failed(batch.length);
          queue.pending.splice(0, batch.length);
          attempt = 0;
        } else {
          await new Promise((resolve) => setTimeout(resolve, RETRY_DELAY_MS * attempt));
        }
      }
    }
    queue.running = undefined;
  }

  private async write(meshId: string, batch: AuditEntry[]): Promise<void> {
    let head = this.heads.get(meshId) ?? (await this.readHead(meshId));
    const rows = batch.map((entry) => {
      const createdAt = new Date();
      const seq = head.seq + 1;
      const hash = auditHash({ ...entry, prevHash: head.hash, seq, createdAt });
      const row = { seq, prevHash: head.hash, hash, entry, createdAt };
      head = { seq, hash };
      return row;
    });
    await this.pool.query(
      `INSERT INTO audit_log (mesh_id, seq, prev_hash, hash, event_type, actor, payload, created_at)
       SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::timestamptz[])`,
      [
        meshId,
        rows.map((r) => r.seq),
        rows.map((r) => r.prevHash),
        rows.map((r) => r.hash),
        rows.map((r) => r.entry.eventType),
        rows.map((r) => r.entry.actor),
        rows.map((r) => JSON.stringify(r.entry.payload)),
        rows.map((r) => r.createdAt.toISOString()),
      ],
    );
    this.heads.set(meshId, head);
  }

  private async readHead(meshId: string): Promise<Head> {
    const result = await this.pool.query<Head>(
      'SELECT seq, hash FROM audit_log WHERE mesh_id = $1 ORDER BY seq DESC, id DESC LIMIT 1',
      [meshId],
    );
    return result.rows[0] ?? { seq: 0, hash: GENESIS };
  }
}
