import { ProtocolError } from '../../protocol/errors.js';
import type { StreamPosition } from '../../protocol/frames.js';
import type { Bus } from '../bus/bus.js';
import type { SessionIdentity } from '../connections/connection.js';
import { inTransaction, type Pool } from '../db/pool.js';
import { allOk, GroupCommit, SESSION_START_BURST_MS } from '../delivery/group-commit.js';
import { type ListReads, primaryReads } from '../regions/regions.js';
import type { Continuity } from './continuity.js';
import { assertCanSubscribe, pageOf, type StreamListPage, type StreamPageRequest } from './limits.js';
import { NO_POSITION, type StreamDataFrame, type StreamSubscription, type Streams } from './streams.js';
import type { LocalStreams } from './streams.local.js';

interface SessionKey {
  meshId: string;
  sessionId: string;
}

/** Sessions whose subscriptions one statement reads at most (two uuid arrays of this length). */
const SESSIONS_PER_READ = 1000;

/**
 * Streams across nodes (flag `ha.streams`). Built on the node's local registry (which still decides who
 * gets a frame on this node), plus:
 * - subscriptions written to Postgres, so `stream.list` counts every node and a session that reconnects
 *   to another node brings its subscriptions along;
 * - a publish delivered here at once, then sent over the bus (mesh channel) to the other nodes, which
 *   hand it to their own subscribers. A node never delivers its own publication twice (the bus drops a
 *   node's own messages);
 * - positions and history in Redis (history.redis.ts): a publish is placed before it goes out, and each
 *   node delivers in offset order, filling what the bus lost (continuity.ts). With Redis unreachable a
 *   publish is refused (`unavailable`) rather than sent without a place.
 * Remote publishes are handed to the local registry whichever implementation the node runs, so a node
 * still on local streams receives what shared nodes publish (it does not send to them).
 */
export class SharedStreams implements Streams {
  /** Sessions starting together (a drain moves thousands) read their subscriptions in one statement. */
  private readonly startingSessions = new GroupCommit<SessionKey, string[]>({
    write: async (sessions) => allOk(await this.subscriptionsOf(sessions)),
    maxInFlight: 1,
    burstMs: SESSION_START_BURST_MS,
    maxBatch: SESSIONS_PER_READ,
  });

  constructor(
    private readonly local: LocalStreams,
    private readonly pool: Pool,
    private readonly bus: Bus,
    /** The sessions connected to this node now. */
    private readonly sessionsHere: () => string[],
    private readonly maxPerSession: number,
    /** Where `stream.list` reads (the regions row); default the primary. */
    private readonly lists: ListReads = primaryReads(pool),
    /** Positions in Redis; none with STREAM_POSITIONS=off. */
    private readonly positions?: Continuity,
  ) {}

  /**
   * Flip to shared: the rows of this node's sessions become what the local registry holds now (what they
   * subscribed or unsubscribed while the row was local), and the rows of sessions that ended meanwhile go.
   * Only live sessions are written: connected here, or with a presence row (inside their grace period). An
   * entry the registry still holds for a session that ended (its end announced on a bus message this node
   * never got) is dropped here, not made the truth.
   */
  async activate(): Promise<void> {
    const here = this.sessionsHere();
    const subscriptions = this.local.all();
    await this.pool.query(
      `DELETE FROM stream_subscriptions s
        WHERE s.session_id = ANY ($1::uuid[])
           OR NOT EXISTS (SELECT 1 FROM presence p WHERE p.session_id = s.session_id)`,
      [here],
    );
    const written = await this.pool.query<{ session_id: string }>(
      `WITH live AS (
         SELECT e.mesh_id, e.stream, e.session_id
           FROM unnest($1::uuid[], $2::text[], $3::uuid[]) AS e (mesh_id, stream, session_id)
          WHERE e.session_id = ANY ($4::uuid[])
             OR EXISTS (SELECT 1 FROM presence p WHERE p.session_id = e.session_id)
       ), inserted AS (
         INSERT INTO stream_subscriptions (mesh_id, stream, session_id) SELECT * FROM live ON CONFLICT DO NOTHING
       )
       SELECT DISTINCT session_id FROM live`,
      [
        subscriptions.map((s) => s.meshId),
        subscriptions.map((s) => s.stream),
        subscriptions.map((s) => s.sessionId),
        here,
      ],
    );
    // What was not written belongs to no live session: the registry forgets it too.
    const live = new Set([...here, ...written.rows.map((row) => row.session_id)]);
    for (const { meshId, sessionId } of subscriptions) {
      if (!live.has(sessionId)) await this.local.sessionEnded(meshId, sessionId);
    }
  }

  async deactivate(): Promise<void> {}

  /**
   * Counted and written under the session's lock in one transaction: the session's sockets on any node
   * (an old one not yet replaced) queue there, so together they never pass the bound.
   */
  async subscribe(
    session: SessionIdentity,
    stream: string,
    since?: StreamPosition,
  ): Promise<StreamSubscription> {
    const had = { value: false };
    const join = () => this.join(session, stream, had);
    if (!this.positions) {
      await join();
      return NO_POSITION;
    }
    // `had` is known only inside the join's transaction; `leave` runs after it.
    return this.positions.subscribe(session, stream, since, false, join, async () => {
      if (!had.value) await this.unsubscribe(session, stream);
    });
  }

  private async join(session: SessionIdentity, stream: string, had: { value: boolean }): Promise<void> {
    await inTransaction(this.pool, async (client) => {
      await client.query("SELECT pg_advisory_xact_lock(hashtextextended('stream-subscriptions:' || $1, 0))", [
        session.sessionId,
      ]);
      const held = await client.query<{ n: number; has: boolean }>(
        `SELECT count(*)::int AS n, coalesce(bool_or(stream = $3), false) AS has
           FROM stream_subscriptions WHERE mesh_id = $1 AND session_id = $2`,
        [session.meshId, session.sessionId, stream],
      );
      const { n, has } = held.rows[0]!;
      had.value = has;
      assertCanSubscribe(n, has, this.maxPerSession);
      await client.query(
        `INSERT INTO stream_subscriptions (mesh_id, stream, session_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
        [session.meshId, stream, session.sessionId],
      );
    });
    // The bound was counted over every node above; here the subscription only joins this node's registry.
    this.local.add(session.meshId, stream, session.sessionId);
  }

  async unsubscribe(session: SessionIdentity, stream: string): Promise<void> {
    await this.pool.query(
      'DELETE FROM stream_subscriptions WHERE mesh_id = $1 AND stream = $2 AND session_id = $3',
      [session.meshId, stream, session.sessionId],
    );
    await this.local.unsubscribe(session, stream);
  }

  async publish(session: SessionIdentity, stream: string, data: unknown): Promise<void> {
    const frame: StreamDataFrame = {
      type: 'stream.data',
      stream,
      data,
      from: session.pubkey,
      fromSession: session.sessionId,
    };
    let placed: StreamDataFrame = frame;
    if (this.positions) {
      try {
        placed = await this.positions.publish(session.meshId, frame);
      } catch {
        throw new ProtocolError(
          'unavailable',
          'stream positions unavailable (Redis): not published, or (after a stall) not confirmed',
        );
      }
    } else this.local.deliverHere(session.meshId, frame);
    // publishedAt rides beside the frame (stripped on arrival) for the receivers' fan-out latency.
    await this.bus.publishToMesh(session.meshId, 'stream.data', { ...placed, publishedAt: Date.now() });
  }

  async list(meshId: string, page: StreamPageRequest): Promise<StreamListPage> {
    const result = await this.lists.read<{ name: string; subscribers: number }>(
      `SELECT stream AS name, count(*)::int AS subscribers FROM stream_subscriptions
        WHERE mesh_id = $1 AND ($2::text IS NULL OR stream COLLATE "C" > $2)
        GROUP BY stream ORDER BY stream COLLATE "C" LIMIT $3`,
      [meshId, page.after ?? null, page.limit + 1],
    );
    return pageOf(result.rows, page.limit);
  }

  /** A session arriving here (perhaps from another node) brings the subscriptions it made anywhere. */
  async sessionStarted(meshId: string, sessionId: string): Promise<void> {
    const streams = await this.startingSessions.submit({ meshId, sessionId });
    for (const stream of streams) this.local.add(meshId, stream, sessionId);
  }

  /** The streams of each session, in order: one statement for them all (by the session index). */
  private async subscriptionsOf(sessions: SessionKey[]): Promise<string[][]> {
    const result = await this.pool.query<{ i: number; stream: string }>(
      `SELECT k.i::int AS i, s.stream
         FROM unnest($1::uuid[], $2::uuid[]) WITH ORDINALITY AS k (mesh_id, session_id, i)
         JOIN stream_subscriptions s ON s.session_id = k.session_id AND s.mesh_id = k.mesh_id`,
      [sessions.map((s) => s.meshId), sessions.map((s) => s.sessionId)],
    );
    const streams = sessions.map((): string[] => []);
    for (const { i, stream } of result.rows) streams[i - 1]!.push(stream);
    return streams;
  }

  async sessionEnded(meshId: string, sessionId: string): Promise<void> {
    await this.pool.query('DELETE FROM stream_subscriptions WHERE mesh_id = $1 AND session_id = $2', [
      meshId,
      sessionId,
    ]);
    await this.local.sessionEnded(meshId, sessionId);
  }

  async close(): Promise<void> {}
}
