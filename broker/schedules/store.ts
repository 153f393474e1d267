/**
 * Scheduled messages in Postgres: what every scheduler implementation reads and updates. Creation,
 * cancel and list check who may do what; firing bookkeeping is the scheduler's.
 */

import { ProtocolError } from '../../protocol/errors.js';
import { inTransaction, type Pool, type PoolClient } from '../db/pool.js';
import { type ListReads, primaryReads } from '../regions/regions.js';

export interface Schedule {
  scheduleId: string;
  meshId: string;
  memberId: number;
  sessionId: string;
  creator: string;
  to: string;
  body: string;
  at: Date | null;
  cron: string | null;
  tz: string | null;
  nextFireAt: Date | null;
  occurrences: number;
  createdAt: Date;
}

const COLUMNS = `s.id AS "scheduleId", s.mesh_id AS "meshId", s.member_id AS "memberId", s.session_id AS "sessionId",
  m.pubkey AS creator, s.target AS "to", s.body, s.fire_at AS "at", s.cron, s.tz, s.next_fire_at AS "nextFireAt",
  s.occurrences, s.created_at AS "createdAt"`;
const ACTIVE = 's.cancelled_at IS NULL AND s.finished_at IS NULL';

export interface NewSchedule {
  meshId: string;
  memberId: number;
  sessionId: string;
  to: string;
  body: string;
  at: Date | null;
  cron: string | null;
  tz: string | null;
  nextFireAt: Date;
}

export class ScheduleStore {
  constructor(private readonly pool: Pool) {}

  /** Creates a schedule unless the member already has `max` active ones (checked in the same statement). */
  async create(schedule: NewSchedule, max: number): Promise<Schedule> {
    // The count and the insert under one per-member lock: two concurrent creates cannot both take the last place.
    const result = await inTransaction(this.pool, async (client) => {
      await client.query("SELECT pg_advisory_xact_lock(hashtextextended('schedules:' || $1, 0))", [
        schedule.memberId,
      ]);
      return client.query<{ id: string }>(
        `INSERT INTO schedules (mesh_id, member_id, session_id, target, body, fire_at, cron, tz, next_fire_at)
       SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
        WHERE (SELECT count(*) FROM schedules s WHERE s.mesh_id = $1 AND s.member_id = $2 AND ${ACTIVE}) < $10
       RETURNING id`,
        [
          schedule.meshId,
          schedule.memberId,
          schedule.sessionId,
          schedule.to,
          schedule.body,
          schedule.at,
          schedule.cron,
          schedule.tz,
          schedule.nextFireAt,
          max,
        ],
      );
    });
    const id = result.rows[0]?.id;
    if (!id) throw new ProtocolError('limit_exceeded', `a member may have at most ${max} active schedules`);
    return (await this.get(id))!;
  }

  /**
   * A schedule by id. With `lockIfDue` (inside a transaction), only if it is still active and due, and
   * locked until the transaction ends.
   */
  async get(
    scheduleId: string,
    db: Pool | PoolClient = this.pool,
    options: { lockIfDue?: boolean } = {},
  ): Promise<Schedule | undefined> {
    // A revoked creator's schedules are never due (revocation also cancels them: cancelMemberSchedules).
    const due = options.lockIfDue
      ? `AND ${ACTIVE} AND s.next_fire_at <= now() AND m.revoked_at IS NULL FOR UPDATE OF s`
      : '';
    const result = await db.query<Schedule>(
      `SELECT ${COLUMNS} FROM schedules s JOIN members m ON m.id = s.member_id WHERE s.id = $1 ${due}`,
      [scheduleId],
    );
    return result.rows[0];
  }

  /** Cancels a schedule of the creating member; another member's is `forbidden`, an unknown one `not_found`. */
  async cancel(meshId: string, memberId: number, scheduleId: string): Promise<void> {
    const result = await this.pool.query<{ memberId: number; active: boolean }>(
      `SELECT member_id AS "memberId", (cancelled_at IS NULL AND finished_at IS NULL) AS active
         FROM schedules WHERE id = $1 AND mesh_id = $2`,
      [scheduleId, meshId],
    );
    const row = result.rows[0];
    if (!row) throw new ProtocolError('not_found', `no schedule ${scheduleId}`);
    if (row.memberId !== memberId)
      throw new ProtocolError('forbidden', 'only the creating member may cancel a schedule');
    if (!row.active) throw new ProtocolError('not_found', `schedule ${scheduleId} is no longer active`);
    await this.pool.query(
      'UPDATE schedules SET cancelled_at = now() WHERE id = $1 AND cancelled_at IS NULL',
      [scheduleId],
    );
  }

  /** The member's active schedules, soonest first. */
  /** `schedule.list`: a lag-tolerant read, through `via` (the regions row) when given. */
  async list(meshId: string, memberId: number, via?: ListReads): Promise<Schedule[]> {
    const result = await (via ?? primaryReads(this.pool)).read<Schedule>(
      `SELECT ${COLUMNS} FROM schedules s JOIN members m ON m.id = s.member_id
        WHERE s.mesh_id = $1 AND s.member_id = $2 AND ${ACTIVE} ORDER BY s.next_fire_at, s.created_at`,
      [meshId, memberId],
    );
    return result.rows;
  }

  /** Every active schedule of every mesh (what a booting local scheduler re-arms). */
  async active(): Promise<Schedule[]> {
    const result = await this.pool.query<Schedule>(
      `SELECT ${COLUMNS} FROM schedules s JOIN members m ON m.id = s.member_id WHERE ${ACTIVE} ORDER BY s.next_fire_at`,
    );
    return result.rows;
  }

  /**
   * Cancels every active schedule of a member (revocation): the shared scheduler re-reads each schedule
   * under its lock before firing, and a local timer that still goes off finds it cancelled and arms no next.
   */
  async cancelMemberSchedules(memberId: number): Promise<number> {
    const result = await this.pool.query(
      `UPDATE schedules SET cancelled_at = now()
        WHERE member_id = $1 AND cancelled_at IS NULL AND finished_at IS NULL`,
      [memberId],
    );
    return result.rowCount ?? 0;
  }

  /** Records that occurrence `occurrence` fired; `next` null finishes the schedule. */
  /** Returns false when the schedule was cancelled meanwhile (nothing to re-arm). */
  async fired(
    scheduleId: string,
    occurrence: number,
    next: Date | null,
    db: Pool | PoolClient = this.pool,
  ): Promise<boolean> {
    const result = await db.query(
      `UPDATE schedules SET occurrences = greatest(occurrences, $2), next_fire_at = $3,
              finished_at = CASE WHEN $3::timestamptz IS NULL THEN now() END
        WHERE id = $1 AND cancelled_at IS NULL RETURNING 1`,
      [scheduleId, occurrence, next],
    );
    return (result.rowCount ?? 0) > 0;
  }
}
