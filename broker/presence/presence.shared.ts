import { CloseCode } from '../../protocol/errors.js';
import type { Bus, Unsubscribe } from '../bus/bus.js';
import type { SessionIdentity } from '../connections/connection.js';
import type { Pool } from '../db/pool.js';
import { GroupCommit, inDistinctRounds, RESUME_BURST_MS } from '../delivery/group-commit.js';
import { HelloRejected, type MemberBinding } from '../hello/admission.js';
import type { Logger } from '../log.js';
import { type ListReads, primaryReads } from '../regions/regions.js';
import { PeriodicTask } from '../timing/periodic.js';
import type { NonceGuard } from './nonces.js';
import type { AttachOutcome, Presence, PresenceEntry, PresenceEvents, PresenceFrame } from './presence.js';
import type { SessionBindings } from './session-bindings.js';

export interface SharedPresenceOptions {
  pool: Pool;
  /** Where `peers.list` reads (the regions row: the read pool with `ha.regions`); default the primary. */
  lists?: ListReads;
  bus: Bus;
  nodeId: string;
  graceMs: number;
  /** A node whose heartbeat is older than this is dead: its sessions are reaped. */
  deadAfterMs: number;
  reapEveryMs: number;
  /** Events this node originates: its sockets, and the node's side effects (audit, cleanup). */
  events: PresenceEvents;
  /** Closes this node's socket of a session that connected again on another node (4409). */
  kickLocal: (sessionId: string) => void;
  /** Cluster-wide nonces (Redis), falling back to this node's memory while Redis is unreachable. */
  nonces: NonceGuard;
  /** Session id → member, kept long after the grace period (shared with the other implementation). */
  bindings: SessionBindings;
  log: Logger;
}

interface Row {
  sessionId: string;
  meshId: string;
  pubkey: string;
}

/** A session's presence row taken over: whether it was (another member's is not), and what it was before. */
interface Takeover {
  /** The member is revoked (or gone) as of this statement: nothing was taken (the admission's re-check). */
  revoked: boolean;
  taken: boolean;
  previousNode: string | null;
  previousDisconnected: Date | null;
}

/** Sessions one takeover statement attaches at most. */
const TAKEOVERS_PER_STATEMENT = 256;

/**
 * Takes the sessions' presence rows over for `nodeId`, in one statement (one round trip, issue 26 item 5;
 * the session ids distinct: `inDistinctRounds`): lock the sessions' rows (those that exist) and read them,
 * then take them over. The insert reads `previous`, so the locks are taken first; they order two nodes
 * admitting one session at once (a takeover that waited reads the winner's row, as a SELECT … FOR UPDATE in
 * its own transaction did). The upsert's WHERE is the member check again, under the row lock: two members
 * racing for one session id cannot both have it (no row is returned for the loser). Rows are locked and
 * written in session id order, so two nodes' statements over the same sessions take their locks in one
 * order (no deadlock between them). The rows to lock are named by an array (`= ANY`), not a join with the
 * batch: a row another transaction is updating is then re-checked, once its lock is granted, on its own
 * newest version (READ COMMITTED's recheck), as the single-session `WHERE session_id = $1` was.
 * Each member's revocation is read again in the same statement (the admission's re-check, after the socket
 * was registered): nothing is taken for a member revoked as of now.
 */
async function takeOver(pool: Pool, nodeId: string, sessions: SessionIdentity[]): Promise<Takeover[]> {
  const result = await pool.query<Takeover & { i: number }>(
    `WITH s AS (
       SELECT * FROM jsonb_to_recordset($1::jsonb)
         AS s (i int, session_id uuid, mesh_id uuid, member_id bigint, name text, groups text[])),
     revoked AS (
       SELECT s.member_id AS id FROM s
        WHERE NOT EXISTS (SELECT 1 FROM members m WHERE m.id = s.member_id AND m.revoked_at IS NULL)),
     previous AS (
       SELECT session_id, node_id, disconnected_at FROM presence
        WHERE session_id = ANY($3::uuid[]) ORDER BY session_id FOR UPDATE),
     taken AS (
       INSERT INTO presence (session_id, mesh_id, member_id, node_id, name, groups)
       SELECT s.session_id, s.mesh_id, s.member_id, $2::text, s.name, s.groups
         FROM s, (SELECT count(*) FROM previous) AS locked_first
        WHERE s.member_id NOT IN (SELECT id FROM revoked)
        ORDER BY s.session_id
       ON CONFLICT (session_id) DO UPDATE
         SET node_id = excluded.node_id, name = excluded.name, groups = excluded.groups, disconnected_at = NULL
         WHERE presence.member_id = excluded.member_id
       RETURNING session_id)
     SELECT s.i, s.member_id IN (SELECT id FROM revoked) AS revoked,
            EXISTS (SELECT 1 FROM taken t WHERE t.session_id = s.session_id) AS taken,
            p.node_id AS "previousNode", p.disconnected_at AS "previousDisconnected"
       FROM s LEFT JOIN previous p ON p.session_id = s.session_id`,
    [
      JSON.stringify(
        sessions.map((identity, i) => ({
          i,
          session_id: identity.sessionId,
          mesh_id: identity.meshId,
          member_id: identity.memberId,
          name: identity.name,
          groups: identity.groups,
        })),
      ),
      nodeId,
      sessions.map((identity) => identity.sessionId),
    ],
  );
  const takeovers = sessions.map<Takeover>(() => ({
    revoked: false,
    taken: false,
    previousNode: null,
    previousDisconnected: null,
  }));
  for (const { i, ...takeover } of result.rows) takeovers[i] = takeover;
  return takeovers;
}

/**
 * Presence rows are the truth (flag `ha.presence`), every row carrying the node that holds the session.
 * - A session that says hello on any node within the grace period takes its row over (reattach: no
 *   `peer.joined`, no `peer.left`); if its old socket is still open on another node, that node is told to
 *   close it (4409).
 * - A session whose socket closed keeps its row, marked disconnected, for the grace period; the node that
 *   held it removes it then (if nobody took it over) and emits the one `peer.left`. Every node also reaps, on
 *   a timer, rows whose grace ran out and rows of dead nodes: whoever deletes a row emits its `peer.left`,
 *   so each leave is announced once. Bound: a dead node's sessions leave at most
 *   max(deadAfter, grace) + reapEvery after its last heartbeat.
 * - Shutdown hands this node's rows to the grace period (they are not deleted), so peers that reconnect
 *   elsewhere keep their presence.
 * - Events go to this node's sockets and, over the bus, to the other nodes of the mesh.
 */
export class SharedPresence implements Presence {
  private readonly graceTimers = new Map<string, NodeJS.Timeout>();
  private readonly reaper: PeriodicTask;
  private detachKick: Unsubscribe | undefined;
  /** Sessions attaching together (a drain's resumes) take their rows over in one statement. */
  private readonly takeovers = new GroupCommit<SessionIdentity, Takeover>({
    write: (batch) =>
      inDistinctRounds(
        batch,
        (identity) => identity.sessionId,
        (round) => takeOver(this.options.pool, this.options.nodeId, round),
      ),
    maxBatch: TAKEOVERS_PER_STATEMENT,
    maxInFlight: 2,
    burstMs: RESUME_BURST_MS,
  });

  constructor(private readonly options: SharedPresenceOptions) {
    this.reaper = new PeriodicTask({
      everyMs: options.reapEveryMs,
      run: () => this.reap(),
      onError: { log: options.log, message: 'presence reaper failed; next round retries' },
    });
  }

  /**
   * Starts reaping and taking kicks. At boot, the rows an earlier run of this node left behind get their
   * grace period (their sockets are gone); after a flip, the sessions here already have their rows.
   */
  async activate(boot: boolean): Promise<void> {
    if (boot) {
      await this.options.pool.query(
        'UPDATE presence SET disconnected_at = now() WHERE node_id = $1 AND disconnected_at IS NULL',
        [this.options.nodeId],
      );
    }
    this.detachKick ??= this.options.bus.on('presence.kick', (_node, payload) => {
      this.kickIfHeldElsewhere(payload.sessionId).catch((error) =>
        this.options.log.warn({ err: error }, 'checking a kick failed; the socket stays'),
      );
    });
    this.reaper.start();
  }

  /** Stops reaping, kicks and grace timers (the rows stay: whoever runs presence next owns them). */
  async deactivate(): Promise<void> {
    // Not awaited, as before: a reap in flight finishes on its own (its deletes are the cluster's).
    void this.reaper.stop();
    this.detachKick?.();
    this.detachKick = undefined;
    for (const timer of this.graceTimers.values()) clearTimeout(timer);
    this.graceTimers.clear();
  }

  /**
   * A kick over the bus is a hint: the socket closes only once Postgres shows the session's presence held by
   * another node (the kicking node took the row over before it published), so a forged kick closes nothing.
   */
  private async kickIfHeldElsewhere(sessionId: string): Promise<void> {
    const result = await this.options.pool.query<{ nodeId: string }>(
      'SELECT node_id AS "nodeId" FROM presence WHERE session_id = $1',
      [sessionId],
    );
    const holder = result.rows[0]?.nodeId;
    if (holder === undefined || holder === this.options.nodeId) {
      this.options.log.warn(
        { sessionId, holder },
        'presence.kick over the bus for a session this node still holds: ignored',
      );
      return;
    }
    this.options.kickLocal(sessionId);
  }

  claimNonce(nonce: string): Promise<boolean> {
    return this.options.nonces.claim(nonce);
  }

  async attach(identity: SessionIdentity): Promise<AttachOutcome> {
    const { nodeId } = this.options;
    clearTimeout(this.graceTimers.get(identity.sessionId));
    this.graceTimers.delete(identity.sessionId);
    const { revoked, taken, previousNode, previousDisconnected } = await this.takeovers.submit(identity);
    if (revoked) return { reattached: previousNode !== null, revoked: true };
    if (!taken) throw new HelloRejected(CloseCode.helloRejected, 'session belongs to another member');
    if (previousNode !== null && previousNode !== nodeId && previousDisconnected === null) {
      // Still connected over there: the newer connection wins, on any node.
      await this.options.bus.publishToNode(previousNode, 'presence.kick', { sessionId: identity.sessionId });
    }
    if (previousNode !== null) return { reattached: true };
    this.emit(identity.meshId, {
      type: 'peer.joined',
      pubkey: identity.pubkey,
      sessionId: identity.sessionId,
      name: identity.name,
    });
    return { reattached: false };
  }

  async detach(identity: SessionIdentity): Promise<void> {
    await this.options.pool.query(
      'UPDATE presence SET disconnected_at = now() WHERE session_id = $1 AND node_id = $2',
      [identity.sessionId, this.options.nodeId],
    );
    const timer = setTimeout(() => {
      this.graceTimers.delete(identity.sessionId);
      this.removeIfStillDisconnectedHere(identity.sessionId).catch((error) =>
        this.options.log.warn({ err: error }, 'presence: grace expiry failed (the reaper will retry)'),
      );
    }, this.options.graceMs);
    timer.unref();
    this.graceTimers.set(identity.sessionId, timer);
  }

  async leave(identity: SessionIdentity): Promise<void> {
    clearTimeout(this.graceTimers.get(identity.sessionId));
    this.graceTimers.delete(identity.sessionId);
    this.announceLeft(
      await this.options.pool.query<Row>(
        `DELETE FROM presence p USING members m WHERE m.id = p.member_id AND p.session_id = $1
         RETURNING p.session_id AS "sessionId", p.mesh_id AS "meshId", m.pubkey`,
        [identity.sessionId],
      ),
    );
  }

  async leaveMember(memberId: number): Promise<void> {
    const sessions = await this.options.pool.query<{ sessionId: string }>(
      'SELECT session_id AS "sessionId" FROM presence WHERE member_id = $1',
      [memberId],
    );
    for (const { sessionId } of sessions.rows) {
      clearTimeout(this.graceTimers.get(sessionId));
      this.graceTimers.delete(sessionId);
    }
    // One statement: every node told of the revocation runs it, and only the first one finds the rows
    // (each peer.left is announced once).
    this.announceLeft(
      await this.options.pool.query<Row>(
        `DELETE FROM presence p USING members m WHERE m.id = p.member_id AND p.member_id = $1
         RETURNING p.session_id AS "sessionId", p.mesh_id AS "meshId", m.pubkey`,
        [memberId],
      ),
    );
  }

  async setStatus(sessionId: string, status: string): Promise<boolean> {
    const result = await this.options.pool.query<Row>(
      `UPDATE presence p SET status = $2 FROM members m WHERE m.id = p.member_id AND p.session_id = $1
       RETURNING p.session_id AS "sessionId", p.mesh_id AS "meshId", m.pubkey`,
      [sessionId, status],
    );
    const row = result.rows[0];
    if (!row) return false;
    this.emit(row.meshId, { type: 'peer.status', pubkey: row.pubkey, sessionId, status });
    return true;
  }

  bindSession(sessionId: string, memberId: number): Promise<boolean> {
    return this.options.bindings.bind(sessionId, memberId);
  }

  bindMember(meshId: string, pubkey: string, sessionId: string): Promise<MemberBinding> {
    return this.options.bindings.bindMember(meshId, pubkey, sessionId);
  }

  async list(meshId: string): Promise<PresenceEntry[]> {
    const lists = this.options.lists ?? primaryReads(this.options.pool);
    const result = await lists.read<PresenceEntry & { connectedAt: Date }>(
      `SELECT m.pubkey, p.session_id AS "sessionId", p.name, p.groups, p.node_id AS node,
              p.connected_at AS "connectedAt", p.status
         FROM presence p JOIN members m ON m.id = p.member_id
        WHERE p.mesh_id = $1 ORDER BY p.connected_at`,
      [meshId],
    );
    return result.rows.map((row) => ({ ...row, connectedAt: row.connectedAt.toISOString() }));
  }

  /** Node shutdown: this node's sessions get their grace period, so they can reattach elsewhere. */
  async close(): Promise<void> {
    await this.options.nonces.close();
    await this.options.pool.query(
      'UPDATE presence SET disconnected_at = now() WHERE node_id = $1 AND disconnected_at IS NULL',
      [this.options.nodeId],
    );
  }

  private async removeIfStillDisconnectedHere(sessionId: string): Promise<void> {
    this.announceLeft(
      await this.options.pool.query<Row>(
        `DELETE FROM presence p USING members m
          WHERE m.id = p.member_id AND p.session_id = $1 AND p.node_id = $2 AND p.disconnected_at IS NOT NULL
          RETURNING p.session_id AS "sessionId", p.mesh_id AS "meshId", m.pubkey`,
        [sessionId, this.options.nodeId],
      ),
    );
  }

  /** Rows whose grace ran out, and rows of dead nodes: removed by whichever node gets there first. */
  private async reap(): Promise<void> {
    this.announceLeft(
      await this.options.pool.query<Row>(
        `DELETE FROM presence p USING members m
          WHERE m.id = p.member_id AND (
            (p.disconnected_at IS NOT NULL AND p.disconnected_at < now() - make_interval(secs => $1 / 1000.0))
            OR p.node_id IN (SELECT id FROM nodes
                              WHERE heartbeat_at < now() - make_interval(secs => greatest($1, $2) / 1000.0)))
          RETURNING p.session_id AS "sessionId", p.mesh_id AS "meshId", m.pubkey`,
        [this.options.graceMs, this.options.deadAfterMs],
      ),
    );
  }

  private announceLeft(result: { rows: Row[] }): void {
    for (const row of result.rows) {
      this.emit(row.meshId, { type: 'peer.left', pubkey: row.pubkey, sessionId: row.sessionId });
    }
  }

  private emit(meshId: string, frame: PresenceFrame): void {
    this.options.events(meshId, frame);
    void this.options.bus.publishToMesh(meshId, 'presence.event', frame);
  }
}
