import type { StreamGap, StreamPosition } from '../../protocol/frames.js';
import type { SessionIdentity } from '../connections/connection.js';
import { CatchUps } from './catch-up.js';
import type { Continuity, Registry } from './continuity.js';
import { assertCanSubscribe, byName, pageOf, type StreamListPage, type StreamPageRequest } from './limits.js';
import {
  NO_POSITION,
  type StreamDataFrame,
  type StreamSink,
  type StreamSubscription,
  type Streams,
} from './streams.js';

/**
 * Subscriptions in this node's memory. The gap on 2+ nodes: a publish reaches only the subscribers
 * connected to the publisher's node, and `list` counts only this node's subscribers.
 */
export class LocalStreams implements Streams, Registry {
  /** meshId → stream → subscribed session ids */
  private readonly subscriptions = new Map<string, Map<string, Set<string>>>();
  /** sessionId → its streams here: what the per-session bound counts. */
  private readonly bySession = new Map<string, Set<string>>();
  /** Sessions resuming a stream: their live frames held, then what they must not get twice. */
  private readonly catchUps: CatchUps;
  /** Positions in this node's memory (history.memory.ts); none with STREAM_POSITIONS=off. */
  private readonly positions: Continuity | undefined;

  constructor(
    private readonly sink: StreamSink,
    private readonly maxPerSession: number,
    positions?: (registry: LocalStreams) => Continuity,
  ) {
    this.catchUps = new CatchUps(sink);
    this.positions = positions?.(this);
  }

  async subscribe(
    session: SessionIdentity,
    stream: string,
    since?: StreamPosition,
  ): Promise<StreamSubscription> {
    const held = this.bySession.get(session.sessionId);
    const has = held?.has(stream) ?? false;
    assertCanSubscribe(held?.size ?? 0, has, this.maxPerSession);
    const join = async () => this.add(session.meshId, stream, session.sessionId);
    if (!this.positions) {
      await join();
      return NO_POSITION;
    }
    return this.positions.subscribe(session, stream, since, has, join, async () =>
      this.remove(session.meshId, stream, session.sessionId),
    );
  }

  async unsubscribe(session: SessionIdentity, stream: string): Promise<void> {
    this.remove(session.meshId, stream, session.sessionId);
  }

  async publish(session: SessionIdentity, stream: string, data: unknown): Promise<void> {
    const frame = {
      type: 'stream.data' as const,
      stream,
      data,
      from: session.pubkey,
      fromSession: session.sessionId,
    };
    if (this.positions) await this.positions.publish(session.meshId, frame);
    else this.deliverHere(session.meshId, frame);
  }

  async list(meshId: string, page: StreamPageRequest): Promise<StreamListPage> {
    const streams = this.subscriptions.get(meshId) ?? new Map<string, Set<string>>();
    const after = page.after;
    const listed = [...streams]
      .filter(([name]) => after === undefined || name > after)
      .map(([name, set]) => ({ name, subscribers: set.size }))
      .sort(byName);
    return pageOf(listed.slice(0, page.limit + 1), page.limit);
  }

  async sessionStarted(): Promise<void> {}

  async sessionEnded(meshId: string, sessionId: string): Promise<void> {
    for (const stream of [...(this.bySession.get(sessionId) ?? [])]) this.remove(meshId, stream, sessionId);
  }

  async activate(): Promise<void> {}

  /** The subscriptions stay: the shared implementation is built on this registry. */
  async deactivate(): Promise<void> {}

  async close(): Promise<void> {
    this.subscriptions.clear();
    this.bySession.clear();
    this.catchUps.clear();
  }

  /**
   * Hands a publish to this node's subscribers of its stream, except the publishing session; returns how
   * many sessions it was handed to.
   */
  deliverHere(meshId: string, frame: StreamDataFrame): number {
    const subscribers = this.subscriptions.get(meshId)?.get(frame.stream);
    if (!subscribers) return 0;
    let to = [...subscribers].filter((id) => id !== frame.fromSession);
    if (this.catchUps.any()) to = to.filter((id) => this.catchUps.passes(id, frame));
    this.sink(to, frame);
    return to.length;
  }

  /** The sessions here that hold the stream, in id order (what shadow mode compares for a publish). */
  subscribersOf(meshId: string, stream: string): string[] {
    return [...(this.subscriptions.get(meshId)?.get(stream) ?? [])].sort();
  }

  /** How many sessions here hold the stream. */
  subscriberCount(meshId: string, stream: string): number {
    return this.subscriptions.get(meshId)?.get(stream)?.size ?? 0;
  }

  hasSubscribers(meshId: string, stream: string): boolean {
    return this.subscriptions.get(meshId)?.has(stream) ?? false;
  }

  /** A notice for every subscriber of the stream here (`stream.gap`). */
  notify(meshId: string, stream: string, frame: StreamGap): void {
    const subscribers = this.subscriptions.get(meshId)?.get(stream);
    if (subscribers) this.sink([...subscribers], frame);
  }

  /** From now on the session's frames of `stream` wait (it is resuming: its replay comes first). */
  hold(sessionId: string, stream: string): void {
    this.catchUps.hold(sessionId, stream);
  }

  /** Sends the session its replay, then what waited above it; `floor`: what it must not get again. */
  release(
    sessionId: string,
    stream: string,
    floor: { epoch: string; through: number } | undefined,
    replay: StreamDataFrame[],
  ): void {
    this.catchUps.release(sessionId, stream, floor, replay);
  }

  /** Every subscription this node holds, for the shared implementation to write through on a flip. */
  all(): Array<{ meshId: string; stream: string; sessionId: string }> {
    const entries = [];
    for (const [meshId, streams] of this.subscriptions) {
      for (const [stream, sessions] of streams)
        for (const sessionId of sessions) entries.push({ meshId, stream, sessionId });
    }
    return entries;
  }

  add(meshId: string, stream: string, sessionId: string): void {
    let streams = this.subscriptions.get(meshId);
    if (!streams) {
      streams = new Map();
      this.subscriptions.set(meshId, streams);
    }
    let subscribers = streams.get(stream);
    if (!subscribers) {
      subscribers = new Set();
      streams.set(stream, subscribers);
    }
    subscribers.add(sessionId);
    const held = this.bySession.get(sessionId) ?? new Set<string>();
    held.add(stream);
    this.bySession.set(sessionId, held);
  }

  private remove(meshId: string, stream: string, sessionId: string): void {
    const streams = this.subscriptions.get(meshId);
    const subscribers = streams?.get(stream);
    if (!streams || !subscribers) return;
    subscribers.delete(sessionId);
    this.catchUps.forget(sessionId, stream);
    const held = this.bySession.get(sessionId);
    held?.delete(stream);
    if (held?.size === 0) this.bySession.delete(sessionId);
    if (subscribers.size === 0) streams.delete(stream);
    if (streams.size === 0) this.subscriptions.delete(meshId);
  }
}
