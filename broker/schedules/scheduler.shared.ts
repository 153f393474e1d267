import { inTransaction, type Pool } from '../db/pool.js';
import { parseMessageId } from '../delivery/message-id.js';
import { acceptMessage } from '../delivery/send-path.js';
import type { AcceptedMessage } from '../delivery/store.js';
import type { Logger } from '../log.js';
import { planted } from '../plants.js';
import { type HomeRegionRule, NO_HOME_RULE } from '../regions/regions.js';
import { PeriodicTask } from '../timing/periodic.js';
import {
  announceOccurrence,
  announceSkip,
  type FireOptions,
  occurrenceMessage,
  refusalSkip,
  type SkipReason,
  sendLimitSkip,
} from './fire.js';
import type { Scheduler } from './scheduler.js';
import type { Schedule, ScheduleStore } from './store.js';
import { laterOf, nextCronRun } from './timing.js';

export interface SharedSchedulerOptions extends FireOptions {
  pool: Pool;
  store: ScheduleStore;
  nodeId: string;
  /** How often every node looks for due occurrences. */
  pollMs: number;
  /** The home-region rule (`ha.regions`): schedules of the meshes it defers are left to their home region. */
  homeRule?: HomeRegionRule;
  log: Logger;
}

/**
 * Exactly-once occurrences with any number of nodes (flag `ha.schedules`). Every node polls for due
 * schedules; each due one is fired in one transaction that
 * 1. takes `pg_advisory_xact_lock` on the schedule (concurrent firers queue here),
 * 2. re-reads the schedule under `FOR UPDATE` and gives up if it is no longer due, cancelled or finished
 *    (another node fired it meanwhile, or a cancel on any node landed),
 * 3. inserts the `(schedule, occurrence)` row (unique: the last line of defence),
 * 4. takes a point from the creator's send bucket; with none left the occurrence is skipped (step 5 only),
 * 5. stores the occurrence's message and its delivery rows (message id `schedule:<id>:<n>`, idempotent too),
 * 6. moves the schedule to its next occurrence (or finishes it),
 * and only after the commit delivers and audits it (or audits the skip). A node killed mid-transaction fires nothing: the
 * transaction rolls back and another node fires the occurrence at its next poll. An occurrence missed
 * while every node was down fires once on recovery; a cron schedule then continues from now.
 */
export class SharedScheduler implements Scheduler {
  private readonly poller: PeriodicTask;
  private readonly soon = new Set<NodeJS.Timeout>();

  constructor(private readonly options: SharedSchedulerOptions) {
    this.poller = new PeriodicTask({
      everyMs: options.pollMs,
      run: () => this.pollOnce(),
      onError: { log: options.log, message: 'schedule poll failed; the next one retries' },
    });
  }

  async activate(): Promise<void> {
    this.poller.start();
  }

  async deactivate(): Promise<void> {
    const inFlight = this.poller.stop();
    for (const timer of this.soon) clearTimeout(timer);
    this.soon.clear();
    await inFlight;
  }

  /** A schedule created here and due before the next poll gets a poll of its own at its time. */
  created(schedule: Schedule): void {
    if (!this.poller.running || !schedule.nextFireAt) return;
    const delay = schedule.nextFireAt.getTime() - Date.now();
    if (delay >= this.options.pollMs) return;
    const timer = setTimeout(
      () => {
        this.soon.delete(timer);
        void this.poll();
      },
      Math.max(0, delay),
    );
    timer.unref();
    this.soon.add(timer);
  }

  cancelled(): void {} // the fire re-checks under the schedule's lock

  async close(): Promise<void> {}

  /** One poll at a time per node; each due schedule fired in its own transaction. */
  poll(): Promise<void> {
    return this.poller.runNow();
  }

  private async pollOnce(): Promise<void> {
    try {
      const deferred = await (this.options.homeRule ?? NO_HOME_RULE).deferred('background');
      const due = await this.options.pool.query<{ id: string }>(
        `SELECT s.id FROM schedules s JOIN members m ON m.id = s.member_id
          WHERE s.cancelled_at IS NULL AND s.finished_at IS NULL AND s.next_fire_at <= now()
            AND m.revoked_at IS NULL AND s.mesh_id <> ALL ($1::uuid[])
          ORDER BY s.next_fire_at LIMIT 200`,
        [deferred],
      );
      for (const { id } of due.rows) await this.fire(id);
    } catch (error) {
      this.options.log.warn({ err: error }, 'schedule poll failed; the next one retries');
    }
  }

  private async fire(scheduleId: string): Promise<void> {
    const { pool, store, nodeId, metrics, log } = this.options;
    // PLANTED BUG (tests only): fired without its claim: no lock on the schedule, its occurrence row ignored.
    const unclaimed = planted('schedule-unclaimed');
    try {
      const outcome = await inTransaction(pool, async (client) => {
        if (!unclaimed)
          await client.query("SELECT pg_advisory_xact_lock(hashtextextended('schedule:' || $1, 0))", [
            scheduleId,
          ]);
        const schedule = await store.get(scheduleId, client, { lockIfDue: !unclaimed });
        if (!schedule) return undefined; // fired, cancelled or finished meanwhile
        const occurrence = schedule.occurrences + 1;
        const claimed = await client.query(
          `INSERT INTO schedule_occurrences (schedule_id, occurrence, node_id) VALUES ($1, $2, $3)
           ON CONFLICT DO NOTHING RETURNING 1`,
          [scheduleId, occurrence, nodeId],
        );
        if (claimed.rowCount === 0 && !unclaimed) return undefined;
        const next = schedule.cron
          ? nextCronRun(schedule.cron, schedule.tz ?? 'UTC', laterOf(new Date(), schedule.nextFireAt))
          : null;
        // A skip (send limit spent, or a refusal such as recipient gone or creator revoked) is final for
        // this occurrence: recorded, and the schedule moves on rather than retrying it forever ahead of
        // every other due schedule. The point is taken only once the occurrence is claimed here.
        const skipped = async (skip: SkipReason) => {
          await store.fired(scheduleId, occurrence, next, client);
          return { schedule, occurrence, skip } as const;
        };
        const limited = await sendLimitSkip(this.options, schedule);
        if (limited) return skipped(limited);
        const { sender, message } = occurrenceMessage(
          schedule,
          occurrence,
          `schedule:${scheduleId}:${occurrence}`,
        );
        let accepted: AcceptedMessage;
        try {
          accepted = await acceptMessage(this.options, { origin: 'schedule', sender, message }, client);
        } catch (error) {
          const refused = refusalSkip(error);
          if (!refused) throw error;
          return skipped(refused);
        }
        await client.query(
          'UPDATE schedule_occurrences SET message_id = $3 WHERE schedule_id = $1 AND occurrence = $2',
          [scheduleId, occurrence, parseMessageId(accepted.frame.messageId)!.id],
        );
        await store.fired(scheduleId, occurrence, next, client);
        return { schedule, occurrence, accepted } as const;
      });
      if (!outcome) return;
      // Announced after the commit only: a rolled-back fire announces nothing.
      if ('skip' in outcome) announceSkip(this.options, outcome.schedule, outcome.occurrence, outcome.skip);
      else await announceOccurrence(this.options, outcome.schedule, outcome.occurrence, outcome.accepted);
    } catch (error) {
      metrics.scheduleFires.inc({ outcome: 'failed' });
      log.error({ err: error, scheduleId }, 'firing a schedule failed; the next poll retries');
    }
  }
}
