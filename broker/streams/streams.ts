/**
 * Streams: ephemeral pub/sub inside a mesh (docs/design.md §2, row "streamSubscriptions").
 *
 * Contract:
 * - `publish` delivers `stream.data` once to every session of the mesh subscribed to the stream, except
 *   the publishing session, with its `offset` (+1 per publish of the stream) and `epoch` (continuity.ts);
 *   each node hands a stream's publishes out in offset order, filling what the bus lost from the bounded
 *   history or announcing it as `stream.gap`. Without positions (STREAM_POSITIONS=off): at most once.
 * - `subscribe` answers the stream's top; with `since` (the last position the session saw) the publishes
 *   after it follow (`recovered: true`), or `recovered: false` and the reason.
 * - Subscriptions belong to the session: they survive reconnects within the presence grace period and
 *   end with `sessionEnded` (the session left for good).
 * - A session holds at most `STREAM_MAX_SUBSCRIPTIONS_PER_SESSION` subscriptions: one more is
 *   `limit_exceeded` and changes nothing (counted over every node where subscriptions are shared).
 * - `list` answers one page in name order (limits.ts).
 * - Frames reach sockets through the `StreamSink` the node registered (one inbound path).
 */
import type { StreamData, StreamPosition, StreamSubscribed } from '../../protocol/frames.js';
import type { SessionIdentity } from '../connections/connection.js';
import type { Lifecycle } from '../rows/lifecycle.js';
import type { StreamListPage, StreamPageRequest } from './limits.js';

export type StreamDataFrame = StreamData;

/** What `subscribe` adds to `stream.subscribed`, and the replay to run once that reply is out. */
export interface StreamSubscription {
  position: Partial<Omit<StreamSubscribed, 'type' | 'stream'>>;
  replay: () => void;
}

/** A subscription without positions (STREAM_POSITIONS=off). */
export const NO_POSITION: StreamSubscription = { position: {}, replay: () => {} };

/** Delivers a stream frame to this node's sessions among `sessionIds` (declared with the node's sinks). */
export type { StreamSink } from '../rows/context.js';

export interface Streams extends Lifecycle {
  /** The reply's position fields, and the replay to run once the reply was sent. */
  subscribe(session: SessionIdentity, stream: string, since?: StreamPosition): Promise<StreamSubscription>;
  unsubscribe(session: SessionIdentity, stream: string): Promise<void>;
  publish(session: SessionIdentity, stream: string, data: unknown): Promise<void>;
  /** One page of the mesh's streams with their subscriber counts. */
  list(meshId: string, page: StreamPageRequest): Promise<StreamListPage>;
  /** A session's hello was accepted on this node (it may bring subscriptions made on another node). */
  sessionStarted(meshId: string, sessionId: string): Promise<void>;
  sessionEnded(meshId: string, sessionId: string): Promise<void>;
}
