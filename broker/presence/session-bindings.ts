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
import { GroupCommit, inDistinctRounds, RESUME_BURST_MS } from '../delivery/group-commit.js';
import type { MemberBinding } from '../hello/admission.js';
import type { Member } from '../identity/directory.js';

/**
 * Session ids kept bound per member. The SDK keeps one session id per client object, so this is a
 * thousand clients' worth of restarts before the oldest id of a member is given up.
 */
export const SESSION_BINDINGS_PER_MEMBER = 1000;

/** One hello's member lookup and binding. */
interface HelloBinding {
  meshId: string;
  pubkey: string;
  sessionId: string;
}

/** Hellos one statement looks up and binds at most. */
const HELLOS_PER_STATEMENT = 256;

/**
 * The member lookup and binding of several hellos in one statement (arrival order; the session ids
 * distinct: `inDistinctRounds`). A hello's row is missing when the mesh has no member with its key.
 * Bindings are written in session id order, so two nodes' statements take their locks in one order.
 */
async function bindMembers(
  pool: Pool,
  hellos: HelloBinding[],
): Promise<Array<MemberBinding & { inserted: boolean }>> {
  const result = await pool.query<Member & { i: string; bound: boolean; inserted: boolean }>(
    `WITH h AS (
       SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[]) WITH ORDINALITY AS h (mesh_id, pubkey, session_id, i)),
     m AS (
       SELECT h.i, h.session_id, mb.id, mb.mesh_id, mb.pubkey, mb.name, mb.groups, mb.created_at, mb.revoked_at
         FROM h JOIN members mb ON mb.mesh_id = h.mesh_id AND mb.pubkey = h.pubkey),
     b AS (
       INSERT INTO session_bindings (session_id, member_id)
       SELECT m.session_id, m.id FROM m WHERE m.revoked_at IS NULL ORDER BY m.session_id
       ON CONFLICT (session_id) DO UPDATE SET last_hello_at = now()
         WHERE session_bindings.member_id = excluded.member_id
       RETURNING session_id, (xmax = 0) AS inserted)
     SELECT m.i, m.id, m.mesh_id AS "meshId", m.pubkey, m.name, m.groups, m.created_at AS "createdAt",
            m.revoked_at AS "revokedAt", b.session_id IS NOT NULL AS bound, coalesce(b.inserted, false) AS inserted
       FROM m LEFT JOIN b ON b.session_id = m.session_id`,
    [hellos.map((h) => h.meshId), hellos.map((h) => h.pubkey), hellos.map((h) => h.sessionId)],
  );
  const bindings = hellos.map(() => ({
    member: undefined as Member | undefined,
    bound: false,
    inserted: false,
  }));
  for (const { i, bound, inserted, ...member } of result.rows)
    bindings[Number(i) - 1] = { member, bound, inserted };
  return bindings;
}

export class SessionBindings {
  /** Hellos arriving together (a drain's resumes) look up their members and bind in one statement. */
  private readonly hellos = new GroupCommit<HelloBinding, MemberBinding & { inserted: boolean }>({
    write: (batch) =>
      inDistinctRounds(
        batch,
        (hello) => hello.sessionId,
        (round) => bindMembers(this.pool, round),
      ),
    maxBatch: HELLOS_PER_STATEMENT,
    maxInFlight: 2,
    burstMs: RESUME_BURST_MS,
  });

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
   * Hellos arriving within `RESUME_BURST_MS` of each other (a drain's resumes) share the statement; each
   * gets its own member and binding, as if alone (a revoked or unknown member fails only its own hello).
   */
  async bindMember(meshId: string, pubkey: string, sessionId: string): Promise<MemberBinding> {
    const { member, bound, inserted } = await this.hellos.submit({ meshId, pubkey, sessionId });
    // A new id only (never on a resume): the member's ids past the bound go, as after `bind`.
    if (member && inserted) await this.evictBeyondBound(member.id);
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
