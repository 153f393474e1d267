/**
 * Streams: ephemeral pub/sub inside a mesh (docs/design.md §2, row "streamSubscriptions").
 *
 * Contract:
 * - `publish` delivers `stream.data` at most once to every session of the mesh subscribed to the
 *   stream, except the publishing session. Nothing is stored: a subscriber that is offline misses it.
 * - Subscriptions belong to the session: they survive reconnects within the presence grace period and
 *   end with `sessionEnded` (the session left for good).
 * - A session holds at most `STREAM_MAX_SUBSCRIPTIONS_PER_SESSION` subscriptions: one more is
 *   `limit_exceeded` and changes nothing (counted over every node where subscriptions are shared).
 * - `list` answers one page in name order (limits.ts).
 * - Frames reach sockets through the `StreamSink` the node registered (one inbound path).
 */
import type { StreamData } from '../../protocol/frames.js';
import type { SessionIdentity } from '../connections/connection.js';
import type { Lifecycle } from '../rows/lifecycle.js';
import type { StreamListPage, StreamPageRequest } from './limits.js';

export type StreamDataFrame = StreamData;

/** Delivers a stream frame to this node's sessions among `sessionIds` (declared with the node's sinks). */
export type { StreamSink } from '../rows/context.js';

export interface Streams extends Lifecycle {
  subscribe(session: SessionIdentity, stream: string): Promise<void>;
  unsubscribe(session: SessionIdentity, stream: string): Promise<void>;
  publish(session: SessionIdentity, stream: string, data: unknown): Promise<void>;
  /** One page of the mesh's streams with their subscriber counts. */
  list(meshId: string, page: StreamPageRequest): Promise<StreamListPage>;
  /** A session's hello was accepted on this node (it may bring subscriptions made on another node). */
  sessionStarted(meshId: string, sessionId: string): Promise<void>;
  sessionEnded(meshId: string, sessionId: string): Promise<void>;
}
