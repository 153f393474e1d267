/** URL watches in Postgres: creation with limits, delete and list by the creating member, poll results. */

import { ProtocolError } from '../../protocol/errors.js';
import { inTransaction, type Pool, type PoolClient } from '../db/pool.js';
import { type ListReads, primaryReads } from '../regions/regions.js';
import type { WatchMode } from './fetch-value.js';

export interface Watch {
  watchId: string;
  meshId: string;
  memberId: number;
  sessionId: string;
  creator: string;
  url: string;
  mode: WatchMode;
  extract: string | null;
  intervalSec: number;
  notifyOn: string;
  lastValue: string | null;
  lastCheckedAt: Date | null;
  lastError: string | null;
  createdAt: Date;
}

/**
 * A watch's row as a poll reads it before it fetches (docs/watches.md § One notification per change): the
 * baseline the fetched value is compared with, and what the poll's write requires unchanged.
 */
export interface PollState {
  /** The last value recorded, by whichever node: the baseline. */
  lastValue: string | null;
  /** Notifications committed so far; the next one is number `notified + 1`. */
  notified: number;
  /** When the last poll was recorded (null: never polled). */
  lastCheckedAt: Date | null;
}

export const WATCH_COLUMNS = `w.id AS "watchId", w.mesh_id AS "meshId", w.member_id AS "memberId", w.session_id AS "sessionId",
  m.pubkey AS creator, w.url, w.mode, w.extract, w.interval_sec AS "intervalSec", w.notify_on AS "notifyOn",
  w.last_value AS "lastValue", w.last_checked_at AS "lastCheckedAt", w.last_error AS "lastError",
  w.created_at AS "createdAt"`;

export interface NewWatch {
  meshId: string;
  memberId: number;
  sessionId: string;
  url: string;
  mode: WatchMode;
  extract: string | null;
  intervalSec: number;
  notifyOn: string;
  ownerNode: string;
}

export interface WatchLimits {
  perMember: number;
  perMesh: number;
}

export class WatchStore {
  constructor(private readonly pool: Pool) {}

  /** Creates a watch unless the member or the mesh is at its limit (checked in the same statement). */
  async create(watch: NewWatch, limits: WatchLimits): Promise<Watch> {
    // Counted and inserted under the mesh's lock: concurrent creates cannot exceed a limit.
    const result = await inTransaction(this.pool, async (client) => {
      await client.query("SELECT pg_advisory_xact_lock(hashtextextended('watches:' || $1, 0))", [
        watch.meshId,
      ]);
      return client.query<{ id: string | null; member: number; mesh: number }>(
        `WITH counts AS (
         SELECT count(*) FILTER (WHERE member_id = $2)::int AS member, count(*)::int AS mesh
           FROM watches WHERE mesh_id = $1 AND deleted_at IS NULL
       ), ins AS (
         INSERT INTO watches (mesh_id, member_id, session_id, url, mode, extract, interval_sec, notify_on, owner_node)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 FROM counts WHERE counts.member < $10 AND counts.mesh < $11
         RETURNING id
       )
       SELECT (SELECT id FROM ins) AS id, counts.member, counts.mesh FROM counts`,
        [
          watch.meshId,
          watch.memberId,
          watch.sessionId,
          watch.url,
          watch.mode,
          watch.extract,
          watch.intervalSec,
          watch.notifyOn,
          watch.ownerNode,
          limits.perMember,
          limits.perMesh,
        ],
      );
    });
    const row = result.rows[0]!;
    if (!row.id) {
      const which =
        row.member >= limits.perMember
          ? `a member may have at most ${limits.perMember}`
          : `a mesh may have at most ${limits.perMesh}`;
      throw new ProtocolError('limit_exceeded', `${which} watches`);
    }
    return (await this.get(row.id))!;
  }

  async get(watchId: string): Promise<Watch | undefined> {
    const result = await this.pool.query<Watch>(
      `SELECT ${WATCH_COLUMNS} FROM watches w JOIN members m ON m.id = w.member_id WHERE w.id = $1 AND w.deleted_at IS NULL`,
      [watchId],
    );
    return result.rows[0];
  }

  /** Deletes a watch of the creating member; another member's is `forbidden`, an unknown one `not_found`. */
  async delete(meshId: string, memberId: number, watchId: string): Promise<void> {
    const result = await this.pool.query<{ memberId: number }>(
      'SELECT member_id AS "memberId" FROM watches WHERE id = $1 AND mesh_id = $2 AND deleted_at IS NULL',
      [watchId, meshId],
    );
    const row = result.rows[0];
    if (!row) throw new ProtocolError('not_found', `no watch ${watchId}`);
    if (row.memberId !== memberId)
      throw new ProtocolError('forbidden', 'only the creating member may delete a watch');
    await this.end(watchId);
  }

  /** Marks a watch gone (deleted, or ended with its session). */
  async end(watchId: string): Promise<void> {
    await this.pool.query('UPDATE watches SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL', [
      watchId,
    ]);
  }

  /** `watch.list`: a lag-tolerant read, through `via` (the regions row) when given. */
  async list(meshId: string, memberId: number, via?: ListReads): Promise<Watch[]> {
    const result = await (via ?? primaryReads(this.pool)).read<Watch>(
      `SELECT ${WATCH_COLUMNS} FROM watches w JOIN members m ON m.id = w.member_id
        WHERE w.mesh_id = $1 AND w.member_id = $2 AND w.deleted_at IS NULL ORDER BY w.created_at`,
      [meshId, memberId],
    );
    return result.rows;
  }

  /**
   * The row a poll starts from (one read, before the fetch), or undefined when the watch may not be polled
   * any more: deleted, or its member revoked.
   */
  async pollState(watchId: string): Promise<PollState | undefined> {
    const result = await this.pool.query<PollState>(
      `SELECT w.last_value AS "lastValue", w.notified, w.last_checked_at AS "lastCheckedAt"
         FROM watches w JOIN members m ON m.id = w.member_id
        WHERE w.id = $1 AND w.deleted_at IS NULL AND m.revoked_at IS NULL`,
      [watchId],
    );
    return result.rows[0];
  }

  /** Ends every live watch of a member (revocation); the pollers holding them stop at their next poll. */
  async endMemberWatches(memberId: number): Promise<number> {
    const result = await this.pool.query(
      'UPDATE watches SET deleted_at = now() WHERE member_id = $1 AND deleted_at IS NULL',
      [memberId],
    );
    return result.rowCount ?? 0;
  }

  /** The watch's last recorded poll (value and time), whichever node made it. */
  async lastPoll(
    watchId: string,
  ): Promise<{ lastValue: string | null; lastCheckedAt: Date | null } | undefined> {
    const result = await this.pool.query<{ lastValue: string | null; lastCheckedAt: Date | null }>(
      'SELECT last_value AS "lastValue", last_checked_at AS "lastCheckedAt" FROM watches WHERE id = $1',
      [watchId],
    );
    return result.rows[0];
  }

  /**
   * Records a poll that notified nothing (its value as the new baseline, or only its error), unless the row
   * moved since `seen`: another poll was recorded or a notification committed meanwhile (a node paused
   * past its lease, or both nodes of a takeover polling), whose write stands. False then.
   */
  async recordPoll(
    watchId: string,
    seen: PollState,
    value: string | null,
    error: string | null,
  ): Promise<boolean> {
    const result = await this.pool.query(
      `UPDATE watches SET last_value = coalesce($4, last_value), last_error = $5, last_checked_at = now()
        WHERE id = $1 AND notified = $2 AND last_checked_at IS NOT DISTINCT FROM $3`,
      [watchId, seen.notified, seen.lastCheckedAt, value, error],
    );
    return (result.rowCount ?? 0) > 0;
  }

  /**
   * One notification of a change from the row `seen` to `value`, in one transaction with the row: the row
   * is locked as it was read (else `superseded`: another node notified or polled since, or is doing so
   * now; nothing is sent), `send` stores notification number `seen.notified + 1` through `db`, and the
   * row takes `value` as its baseline with the count raised. A `held` send stores nothing and leaves the
   * row as it was. So a change is notified at most once, whichever nodes poll the watch.
   */
  async commitNotification<T extends object>(
    watchId: string,
    seen: PollState,
    value: string,
    send: (db: PoolClient, number: number) => Promise<T | 'held'>,
  ): Promise<T | 'held' | 'superseded'> {
    return inTransaction(this.pool, async (client) => {
      // SKIP LOCKED: a node paused inside this transaction holds the row; the others skip it meanwhile.
      const claimed = await client.query(
        `SELECT 1 FROM watches WHERE id = $1 AND notified = $2 AND last_checked_at IS NOT DISTINCT FROM $3
            AND deleted_at IS NULL
          FOR UPDATE SKIP LOCKED`,
        [watchId, seen.notified, seen.lastCheckedAt],
      );
      if (claimed.rowCount === 0) return 'superseded';
      const sent = await send(client, seen.notified + 1);
      if (sent === 'held') return 'held';
      await client.query(
        `UPDATE watches SET last_value = $2, notified = notified + 1, last_error = NULL, last_checked_at = now()
          WHERE id = $1`,
        [watchId, value],
      );
      return sent;
    });
  }
}
