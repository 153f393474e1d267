/**
 * Which member a session id belongs to, beyond its presence row (docs/presence.md § Session ids).
 *
 * A presence row lives while the session is connected and for its grace period; once it is gone, nothing
 * else said whose the id was, so another member could say hello with it and the owner's next hello was
 * refused (issue 17, item 6). A binding is written at the session's first accepted hello and refreshed at
 * every later one; it is the same table for both presence implementations (Postgres is the truth in every
 * phase), so it also holds across nodes, restarts and flips.
 *
 * Bound: a member keeps its `SESSION_BINDINGS_PER_MEMBER` most recently used session ids. A member that
 * makes more evicts its own least recently used ones (never one with a presence row): what a member can
 * make the node hold is bounded, and the eviction only ever costs that member.
 */
import type { Pool } from '../db/pool.js';
import type { MemberBinding } from '../hello/admission.js';
import type { Member } from '../identity/directory.js';

/**
 * Session ids kept bound per member. The SDK keeps one session id per client object, so this is a
 * thousand clients' worth of restarts before the oldest id of a member is given up.
 */
export const SESSION_BINDINGS_PER_MEMBER = 1000;

export class SessionBindings {
  constructor(
    private readonly pool: Pool,
    private readonly perMember = SESSION_BINDINGS_PER_MEMBER,
  ) {}

  /**
   * Binds `sessionId` to `memberId`, or confirms and refreshes a binding it already has. False when the
   * id is bound to another member: nothing is written then. One statement, so two members racing for a
   * new id cannot both have it (the primary key decides).
   */
  async bind(sessionId: string, memberId: number): Promise<boolean> {
    const result = await this.pool.query<{ inserted: boolean }>(
      `INSERT INTO session_bindings (session_id, member_id) VALUES ($1, $2)
       ON CONFLICT (session_id) DO UPDATE SET last_hello_at = now()
         WHERE session_bindings.member_id = excluded.member_id
       RETURNING (xmax = 0) AS inserted`,
      [sessionId, memberId],
    );
    const row = result.rows[0];
    if (!row) return false;
    if (row.inserted) await this.evictBeyondBound(memberId);
    return true;
  }

  /**
   * A hello's member lookup and its session binding in one statement (one round trip, issue 26 item 5):
   * the binding is written only when the mesh has a member with that key and it is not revoked, so a hello
   * from outside the mesh, or of a revoked member, still writes nothing. Same binding rule as `bind`.
   */
  async bindMember(meshId: string, pubkey: string, sessionId: string): Promise<MemberBinding> {
    const result = await this.pool.query<Member & { bound: boolean; inserted: boolean }>(
      `WITH m AS (
         SELECT id, mesh_id, pubkey, name, groups, created_at, revoked_at
           FROM members WHERE mesh_id = $1 AND pubkey = $2),
       b AS (
         INSERT INTO session_bindings (session_id, member_id)
         SELECT $3::uuid, m.id FROM m WHERE m.revoked_at IS NULL
         ON CONFLICT (session_id) DO UPDATE SET last_hello_at = now()
           WHERE session_bindings.member_id = excluded.member_id
         RETURNING (xmax = 0) AS inserted)
       SELECT m.id, m.mesh_id AS "meshId", m.pubkey, m.name, m.groups, m.created_at AS "createdAt",
              m.revoked_at AS "revokedAt", EXISTS (SELECT 1 FROM b) AS bound,
              coalesce((SELECT inserted FROM b), false) AS inserted
         FROM m`,
      [meshId, pubkey, sessionId],
    );
    const row = result.rows[0];
    if (!row) return { member: undefined, bound: false };
    const { bound, inserted, ...member } = row;
    // A new id only (never on a resume): the member's ids past the bound go, as after `bind`.
    if (inserted) await this.evictBeyondBound(member.id);
    return { member, bound };
  }

  /** The member a session id is bound to, if any. */
  async ownerOf(sessionId: string): Promise<number | undefined> {
    const result = await this.pool.query<{ memberId: number }>(
      'SELECT member_id AS "memberId" FROM session_bindings WHERE session_id = $1',
      [sessionId],
    );
    return result.rows[0]?.memberId;
  }

  /** Only after a new binding: the member's ids past the bound, least recently used first, not present. */
  private async evictBeyondBound(memberId: number): Promise<void> {
    await this.pool.query(
      `DELETE FROM session_bindings
        WHERE session_id IN (
          SELECT b.session_id FROM session_bindings b
           WHERE b.member_id = $1
           ORDER BY b.last_hello_at DESC, b.session_id
          OFFSET $2)
          AND NOT EXISTS (SELECT 1 FROM presence p WHERE p.session_id = session_bindings.session_id)`,
      [memberId, this.perMember],
    );
  }
}
