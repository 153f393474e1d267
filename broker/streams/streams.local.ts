import type { SessionIdentity } from '../connections/connection.js';
import { assertCanSubscribe, byName, pageOf, type StreamListPage, type StreamPageRequest } from './limits.js';
import type { StreamDataFrame, StreamSink, Streams } from './streams.js';

/**
 * Subscriptions in this node's memory. The gap on 2+ nodes: a publish reaches only the subscribers
 * connected to the publisher's node, and `list` counts only this node's subscribers.
 */
export class LocalStreams implements Streams {
  /** meshId → stream → subscribed session ids */
  private readonly subscriptions = new Map<string, Map<string, Set<string>>>();
  /** sessionId → its streams here: what the per-session bound counts. */
  private readonly bySession = new Map<string, Set<string>>();

  constructor(
    private readonly sink: StreamSink,
    private readonly maxPerSession: number,
  ) {}

  async subscribe(session: SessionIdentity, stream: string): Promise<void> {
    const held = this.bySession.get(session.sessionId);
    assertCanSubscribe(held?.size ?? 0, held?.has(stream) ?? false, this.maxPerSession);
    this.add(session.meshId, stream, session.sessionId);
  }

  async unsubscribe(session: SessionIdentity, stream: string): Promise<void> {
    this.remove(session.meshId, stream, session.sessionId);
  }

  async publish(session: SessionIdentity, stream: string, data: unknown): Promise<void> {
    this.deliverHere(session.meshId, {
      type: 'stream.data',
      stream,
      data,
      from: session.pubkey,
      fromSession: session.sessionId,
    });
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
  }

  /**
   * Hands a publish to this node's subscribers of its stream, except the publishing session; returns how
   * many sessions it was handed to.
   */
  deliverHere(meshId: string, frame: StreamDataFrame): number {
    const subscribers = this.subscriptions.get(meshId)?.get(frame.stream);
    if (!subscribers) return 0;
    const to = [...subscribers].filter((id) => id !== frame.fromSession);
    this.sink(to, frame);
    return to.length;
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
    const held = this.bySession.get(sessionId);
    held?.delete(stream);
    if (held?.size === 0) this.bySession.delete(sessionId);
    if (subscribers.size === 0) streams.delete(stream);
    if (streams.size === 0) this.subscriptions.delete(meshId);
  }
}
