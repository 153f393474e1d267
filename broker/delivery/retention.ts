/**
 * Retention (docs/delivery.md § Retention): what nobody is owed any more is removed, so the database stays
 * flat under steady load. An ack deletes its delivery row at once (acks.ts); this removes, in batches:
 * - messages no member is owed any more, once older than MESSAGE_RETENTION_MS: until then a retried `id`
 *   is still recognised as the same message (the idempotency window), after it the same `id` is new;
 * - delivery rows still unacked past BACKLOG_MAX_AGE_MS (expired: the member is no longer owed them).
 * Every node runs it; one round at a time cluster-wide (a try-lock), and a round stops after a few
 * batches so it never holds the database for long.
 */
import { inTransaction, type Pool, type PoolClient } from '../db/pool.js';
import type { Logger } from '../log.js';
import { PeriodicTask } from '../timing/periodic.js';

/** Rows one statement removes at most, and statements one round runs at most. */
const BATCH = 5000;
const BATCHES_PER_ROUND = 10;
const LOCK_KEY = 7_310_015;

export interface RetentionOptions {
  pool: Pool;
  messageRetentionMs: number;
  backlogMaxAgeMs: number;
  intervalMs: number;
  removed: (what: 'messages' | 'expired', count: number) => void;
  log: Logger;
}

export class Retention {
  private readonly rounds: PeriodicTask;

  constructor(private readonly options: RetentionOptions) {
    this.rounds = new PeriodicTask({
      everyMs: options.intervalMs,
      run: () => this.runOnce(),
      onError: { log: options.log, message: 'retention round failed; the next one retries' },
    });
  }

  start(): void {
    this.rounds.start();
  }

  stop(): Promise<void> {
    return this.rounds.stop();
  }

  /** One round now (also what the timer runs; joins a round in flight); resolves when it is done. */
  run(): Promise<void> {
    return this.rounds.runNow();
  }

  private async runOnce(): Promise<void> {
    for (let i = 0; i < BATCHES_PER_ROUND; i++) {
      const done = await inTransaction(this.options.pool, async (client) => {
        const locked = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS ok', [
          LOCK_KEY,
        ]);
        if (!locked.rows[0]?.ok) return true; // another node is at it
        const expired = await this.expire(client);
        const messages = await this.removeMessages(client);
        return expired < BATCH && messages < BATCH;
      });
      if (done) return;
    }
  }

  /** Rows still unacked past the backlog's age: the member is no longer owed them. */
  private async expire(client: PoolClient): Promise<number> {
    const result = await client.query(
      `DELETE FROM deliveries WHERE (member_id, seq) IN (
         SELECT d.member_id, d.seq FROM deliveries d JOIN messages m ON m.id = d.message_id
          WHERE m.created_at < now() - make_interval(secs => $1 / 1000.0)
          LIMIT ${BATCH})`,
      [this.options.backlogMaxAgeMs],
    );
    const count = result.rowCount ?? 0;
    if (count > 0) this.options.removed('expired', count);
    return count;
  }

  /** Messages nobody is owed any more, past the idempotency window. */
  private async removeMessages(client: PoolClient): Promise<number> {
    const result = await client.query(
      `DELETE FROM messages WHERE id IN (
         SELECT m.id FROM messages m
          WHERE m.created_at < now() - make_interval(secs => $1 / 1000.0)
            AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = m.id)
          ORDER BY m.created_at LIMIT ${BATCH})`,
      [this.options.messageRetentionMs],
    );
    const count = result.rowCount ?? 0;
    if (count > 0) this.options.removed('messages', count);
    return count;
  }
}
