import type { SessionIdentity } from '../connections/connection.js';
import type { Pool } from '../db/pool.js';
import { GroupCommit, inDistinctRounds, RESUME_BURST_MS } from '../delivery/group-commit.js';
import type { MemberBinding } from '../hello/admission.js';
import type { Logger } from '../log.js';
import type { NonceGuard } from './nonces.js';
import type { AttachOutcome, Presence, PresenceEntry, PresenceEvents } from './presence.js';
import type { SessionBindings } from './session-bindings.js';

interface LocalSession {
  identity: SessionIdentity;
  connectedAt: Date;
  status: string | null;
  /** Set while the session is disconnected and inside its grace period. */
  graceTimer?: NodeJS.Timeout;
}

export interface LocalPresenceOptions {
  pool: Pool;
  nodeId: string;
  graceMs: number;
  events: PresenceEvents;
  nonces: NonceGuard;
  /** Session id → member, kept long after the grace period (shared with the other implementation). */
  bindings: SessionBindings;
  /** The sessions connected to this node now (taken over when the row flips back to local). */
  connected: () => SessionIdentity[];
  log: Logger;
}

/** A session's presence row as the local implementation writes it (for visibility only). */
interface RowWrite {
  identity: SessionIdentity;
  connectedAt: Date;
}

/** Rows one statement writes at most. */
const ROWS_PER_STATEMENT = 256;

/**
 * The sessions' rows, one statement (the session ids distinct: `inDistinctRounds`), in session-id order: a
 * row of another member's session is left as it is (the member check in the upsert's WHERE). Each member's
 * revocation is read again in the same statement (no extra round trip): a row is written only for a member
 * not revoked (nor gone) as of now, after the socket was registered. Per write: whether it was revoked.
 */
async function writeRows(pool: Pool, nodeId: string, writes: RowWrite[]): Promise<boolean[]> {
  const result = await pool.query<{ i: number; revoked: boolean }>(
    `WITH s AS (
       SELECT * FROM jsonb_to_recordset($1::jsonb)
         AS s (i int, session_id uuid, mesh_id uuid, member_id bigint, name text, groups text[],
               connected_at timestamptz)),
     revoked AS (
       SELECT s.member_id AS id FROM s
        WHERE NOT EXISTS (SELECT 1 FROM members m WHERE m.id = s.member_id AND m.revoked_at IS NULL)),
     upsert AS (
       INSERT INTO presence (session_id, mesh_id, member_id, node_id, name, groups, connected_at)
       SELECT s.session_id, s.mesh_id, s.member_id, $2::text, s.name, s.groups, s.connected_at
         FROM s WHERE s.member_id NOT IN (SELECT id FROM revoked)
        ORDER BY s.session_id
       ON CONFLICT (session_id) DO UPDATE
         SET node_id = excluded.node_id, name = excluded.name, groups = excluded.groups, disconnected_at = NULL
         WHERE presence.member_id = excluded.member_id)
     SELECT s.i, s.member_id IN (SELECT id FROM revoked) AS revoked FROM s`,
    [
      JSON.stringify(
        writes.map(({ identity, connectedAt }, i) => ({
          i,
          session_id: identity.sessionId,
          mesh_id: identity.meshId,
          member_id: identity.memberId,
          name: identity.name,
          groups: identity.groups,
          connected_at: connectedAt.toISOString(),
        })),
      ),
      nodeId,
    ],
  );
  const revoked = writes.map(() => false);
  for (const row of result.rows) revoked[row.i] = row.revoked;
  return revoked;
}

/**
 * The single-node presence: this node's memory decides who is online, and the presence rows are written
 * for visibility only. Gaps on 2+ nodes (what the smoke suite documents): `list` shows only this node's
 * sessions; a session that reconnects to another node within the grace period gets a second `peer.joined`
 * there and, when this node's grace timer fires, a false `peer.left`.
 */
export class LocalPresence implements Presence {
  private readonly sessions = new Map<string, LocalSession>();
  /** Sessions attaching together (a drain's resumes) write their rows in one statement. */
  private readonly upserts = new GroupCommit<RowWrite, boolean>({
    write: (batch) =>
      inDistinctRounds(
        batch,
        (write) => write.identity.sessionId,
        (round) => writeRows(this.options.pool, this.options.nodeId, round),
      ),
    maxBatch: ROWS_PER_STATEMENT,
    maxInFlight: 2,
    burstMs: RESUME_BURST_MS,
  });

  constructor(private readonly options: LocalPresenceOptions) {}

  /** At boot: forget this node's rows of an earlier run. After a flip: the sessions here are ours again. */
  async activate(boot: boolean): Promise<void> {
    if (boot) {
      await this.options.pool.query('DELETE FROM presence WHERE node_id = $1', [this.options.nodeId]);
      return;
    }
    // The shared implementation's sessions of this node are ours now: the connected ones, and those inside
    // their grace period (their grace continues here, so they can still come back, or leave once).
    const rows = await this.options.pool.query<{
      sessionId: string;
      meshId: string;
      memberId: number;
      pubkey: string;
      name: string | null;
      groups: string[];
      connectedAt: Date;
      status: string | null;
      disconnectedAt: Date | null;
    }>(
      `SELECT p.session_id AS "sessionId", p.mesh_id AS "meshId", p.member_id AS "memberId", m.pubkey, p.name,
              p.groups, p.connected_at AS "connectedAt", p.status, p.disconnected_at AS "disconnectedAt"
         FROM presence p JOIN members m ON m.id = p.member_id WHERE p.node_id = $1`,
      [this.options.nodeId],
    );
    const connected = new Set(this.options.connected().map((identity) => identity.sessionId));
    for (const row of rows.rows) {
      if (this.sessions.has(row.sessionId)) continue;
      const identity: SessionIdentity = {
        sessionId: row.sessionId,
        meshId: row.meshId,
        memberId: row.memberId,
        pubkey: row.pubkey,
        name: row.name,
        groups: row.groups,
      };
      const session: LocalSession = { identity, connectedAt: row.connectedAt, status: row.status };
      this.sessions.set(row.sessionId, session);
      if (connected.has(row.sessionId) || !row.disconnectedAt) continue;
      const left = Math.max(0, this.options.graceMs - (Date.now() - row.disconnectedAt.getTime()));
      session.graceTimer = setTimeout(() => {
        this.leave(identity).catch((error) =>
          this.options.log.error({ err: error }, 'presence leave failed'),
        );
      }, left);
      session.graceTimer.unref();
    }
  }

  /** The sessions go to the shared implementation (their rows stay): forget them and their grace timers. */
  async deactivate(): Promise<void> {
    for (const session of this.sessions.values()) if (session.graceTimer) clearTimeout(session.graceTimer);
    this.sessions.clear();
  }

  claimNonce(nonce: string): Promise<boolean> {
    return this.options.nonces.claim(nonce);
  }

  async attach(identity: SessionIdentity): Promise<AttachOutcome> {
    const known = this.sessions.get(identity.sessionId);
    const reattached = known !== undefined;
    const connectedAt = known?.connectedAt ?? new Date();
    if (await this.upserts.submit({ identity, connectedAt })) return { reattached, revoked: true };
    if (known?.graceTimer) clearTimeout(known.graceTimer);
    const session: LocalSession = { identity, connectedAt, status: known?.status ?? null };
    this.sessions.set(identity.sessionId, session);
    if (!reattached) {
      this.options.events(identity.meshId, {
        type: 'peer.joined',
        pubkey: identity.pubkey,
        sessionId: identity.sessionId,
        name: identity.name,
      });
    }
    return { reattached };
  }

  async detach(identity: SessionIdentity): Promise<void> {
    const session = this.sessions.get(identity.sessionId);
    if (!session) return;
    if (session.graceTimer) clearTimeout(session.graceTimer);
    session.graceTimer = setTimeout(() => {
      this.leave(identity).catch((error) => this.options.log.error({ err: error }, 'presence leave failed'));
    }, this.options.graceMs);
    session.graceTimer.unref();
    await this.options.pool.query(
      'UPDATE presence SET disconnected_at = now() WHERE session_id = $1 AND node_id = $2',
      [identity.sessionId, this.options.nodeId],
    );
  }

  async leave(identity: SessionIdentity): Promise<void> {
    const session = this.sessions.get(identity.sessionId);
    if (!session) return;
    if (session.graceTimer) clearTimeout(session.graceTimer);
    this.sessions.delete(identity.sessionId);
    await this.options.pool.query('DELETE FROM presence WHERE session_id = $1 AND node_id = $2', [
      identity.sessionId,
      this.options.nodeId,
    ]);
    this.options.events(identity.meshId, {
      type: 'peer.left',
      pubkey: identity.pubkey,
      sessionId: identity.sessionId,
    });
  }

  async leaveMember(memberId: number): Promise<void> {
    for (const session of [...this.sessions.values()])
      if (session.identity.memberId === memberId) await this.leave(session.identity);
  }

  async setStatus(sessionId: string, status: string): Promise<boolean> {
    const session = this.sessions.get(sessionId);
    if (!session) return false;
    session.status = status;
    await this.options.pool.query('UPDATE presence SET status = $2 WHERE session_id = $1 AND node_id = $3', [
      sessionId,
      status,
      this.options.nodeId,
    ]);
    const { meshId, pubkey } = session.identity;
    this.options.events(meshId, { type: 'peer.status', pubkey, sessionId, status });
    return true;
  }

  bindSession(sessionId: string, memberId: number): Promise<boolean> {
    return this.options.bindings.bind(sessionId, memberId);
  }

  bindMember(meshId: string, pubkey: string, sessionId: string): Promise<MemberBinding> {
    return this.options.bindings.bindMember(meshId, pubkey, sessionId);
  }

  async list(meshId: string): Promise<PresenceEntry[]> {
    const entries: PresenceEntry[] = [];
    for (const { identity, connectedAt, status } of this.sessions.values()) {
      if (identity.meshId !== meshId) continue;
      entries.push({
        pubkey: identity.pubkey,
        sessionId: identity.sessionId,
        name: identity.name,
        groups: identity.groups,
        node: this.options.nodeId,
        connectedAt: connectedAt.toISOString(),
        status,
      });
    }
    return entries;
  }

  /** Node shutdown: this node's sessions end with it; only its own rows are cleared. */
  async close(): Promise<void> {
    await this.options.nonces.close();
    await this.options.pool.query('DELETE FROM presence WHERE node_id = $1', [this.options.nodeId]);
  }
}
