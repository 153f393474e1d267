/**
 * Typed stream subscriptions (docs/protocol.md § Streams, docs/sdk.md § Streams): `client.streams
 * .subscribe(name, { recover })` returns a StreamSubscription whose events are `data`, `gap`, `recovered`
 * and `error`. The SDK sends `stream.subscribe` again after every welcome (idempotent on the broker), so a
 * peer that lands on another node keeps its subscriptions. With `recover`, it sends `since` with the last
 * position it delivered, drops `stream.data` at or before that position in the same epoch (a replay seen
 * twice), and reports what the broker says it could or could not fill. Positions (`offset`, `epoch`) are
 * optional on the wire: against a broker without them every frame is delivered and nothing is recovered.
 */
import type { Frame, StreamData } from '../protocol/frames.js';
import { Emitter } from './emitter.js';
import { MeshRequestError } from './errors.js';
import type { Session } from './session.js';

/** A stream position: the broker's offset within an epoch (a new epoch restarts the offsets). */
export interface StreamPosition {
  offset: number;
  epoch: string;
}

/** A `stream.data` as the subscription delivers it; `offset`/`epoch` when the broker numbers the stream. */
export interface StreamMessage extends StreamData {
  offset?: number;
  epoch?: string;
}

/** What could not be filled: offsets `from`…`to` of `epoch` are lost for this subscriber. */
export interface StreamGap {
  stream: string;
  epoch?: string;
  from?: number;
  to?: number;
  reason: string;
}

/** The broker's answer to a resume with `since`: `recovered: false` says why (`reason`). */
export interface StreamRecovery {
  stream: string;
  recovered: boolean;
  reason?: string;
  since: StreamPosition;
  position?: StreamPosition;
}

export interface StreamSubscriptionEvents {
  data: StreamMessage;
  gap: StreamGap;
  recovered: StreamRecovery;
  /** A (re)subscription the broker refused (e.g. `limit_exceeded`); the subscription stays wanted. */
  error: MeshRequestError;
  /** Every `stream.subscribed` (the first and each one after a reconnect). */
  subscribed: Frame;
}

export interface SubscribeOptions {
  /** Resume from the last delivered position after a reconnect (needs a broker with positions). */
  recover?: boolean;
}

export class StreamSubscription extends Emitter<StreamSubscriptionEvents> {
  /** The last position delivered to `data` listeners (with `recover`, what a resume asks from). */
  position: StreamPosition | undefined;
  /** Resolves at the first `stream.subscribed`, rejects if the broker refuses the first subscribe. */
  readonly ready: Promise<void>;
  private active = true;
  private sentAt = -1;
  /** The `since` of the subscribe in flight, for its reply. */
  private since: StreamPosition | undefined;
  private settleReady!: (error?: Error) => void;

  constructor(
    private readonly client: Session,
    readonly name: string,
    readonly options: SubscribeOptions,
    private readonly forget: (subscription: StreamSubscription) => void,
  ) {
    super();
    this.ready = new Promise<void>((resolve, reject) => {
      this.settleReady = (error) => (error ? reject(error) : resolve());
    });
    // A caller that only listens to `error` must not get an unhandled rejection as well.
    this.ready.catch(() => {});
  }

  get subscribed(): boolean {
    return this.active;
  }

  /** Sends `stream.subscribe` unless this connection (welcome number) already had it. */
  sendIfNeeded(): void {
    if (!this.active || !this.client.connected || this.sentAt === this.client.welcomes) return;
    this.sentAt = this.client.welcomes;
    const since = this.options.recover ? this.position : undefined;
    this.since = since;
    const frame: Frame = { type: 'stream.subscribe', stream: this.name, ...(since ? { since } : {}) };
    // The reply itself is handled by `onSubscribed`, from the frame listener: synchronously, before a
    // `stream.data` that follows it in the same read (a promise's continuation would run after it).
    this.client.request(frame).catch((error: Error) => this.onRefused(error));
  }

  /** A frame of this stream: delivered unless it is one already delivered (same epoch, offset ≤ last). */
  deliver(frame: StreamMessage): void {
    if (!this.active) return;
    const { offset, epoch } = frame;
    if (typeof offset === 'number' && typeof epoch === 'string') {
      if (this.position && this.position.epoch === epoch && offset <= this.position.offset) return;
      this.position = { offset, epoch };
    }
    this.emit('data', frame);
  }

  reportGap(frame: Frame): void {
    if (!this.active) return;
    const gap: StreamGap = { stream: this.name, reason: String(frame.reason ?? 'unknown') };
    if (typeof frame.epoch === 'string') gap.epoch = frame.epoch;
    if (typeof frame.from === 'number') gap.from = frame.from;
    if (typeof frame.to === 'number') gap.to = frame.to;
    // Past the gap: a resume must not ask again for what the broker said is gone.
    if (
      gap.epoch !== undefined &&
      gap.to !== undefined &&
      !(this.position?.epoch === gap.epoch && this.position.offset >= gap.to)
    ) {
      this.position = { epoch: gap.epoch, offset: gap.to };
    }
    this.emit('gap', gap);
  }

  /** Ends the subscription: no more events, and the broker stops sending (when connected). */
  async unsubscribe(options: { signal?: AbortSignal } = {}): Promise<void> {
    if (!this.active) return;
    this.active = false;
    this.forget(this);
    if (this.client.connected) {
      await this.client.request({ type: 'stream.unsubscribe', stream: this.name }, options);
    }
  }

  /** A `stream.subscribed` for this stream: the position it starts from, and what a resume recovered. */
  onSubscribed(reply: Frame): void {
    if (!this.active) return;
    const since = this.since;
    this.since = undefined;
    const position =
      typeof reply.offset === 'number' && typeof reply.epoch === 'string'
        ? { offset: reply.offset, epoch: reply.epoch }
        : undefined;
    // A first subscription starts at the stream's current position: what came before is not ours.
    if (!this.position && position) this.position = position;
    this.settleReady();
    this.emit('subscribed', reply);
    // Not recovered: the history no longer holds what followed `since`; go on from where the stream is.
    if (since && reply.recovered === false && position) this.position = position;
    if (since && typeof reply.recovered === 'boolean') {
      const recovery: StreamRecovery = { stream: this.name, recovered: reply.recovered, since };
      if (typeof reply.reason === 'string') recovery.reason = reply.reason;
      if (position) recovery.position = position;
      this.emit('recovered', recovery);
    }
  }

  private onRefused(error: Error): void {
    // A lost connection is not a refusal: the next welcome sends it again.
    if (error instanceof MeshRequestError && (error.code === 'disconnected' || error.code === 'closed')) {
      if (error.code === 'disconnected') this.sentAt = -1;
      else this.settleReady(error);
      return;
    }
    this.settleReady(error);
    this.emit(
      'error',
      error instanceof MeshRequestError ? error : new MeshRequestError('error', error.message),
    );
  }
}

/** `client.streams`: the subscriptions of one client, by stream name, and the stream requests. */
export class StreamsApi {
  private readonly subscriptions = new Map<string, StreamSubscription>();
  /**
   * Names unsubscribed while disconnected: a session resumed within its grace period still holds them on
   * the node, so the unsubscribe goes out at the next welcome (at most one per name ever subscribed).
   */
  private readonly leaving = new Set<string>();

  constructor(private readonly client: Session) {
    client.on('welcome', () => {
      for (const name of this.leaving) {
        if (this.subscriptions.has(name)) continue;
        client.request({ type: 'stream.unsubscribe', stream: name }).catch(() => {});
      }
      this.leaving.clear();
      for (const subscription of this.subscriptions.values()) subscription.sendIfNeeded();
    });
    client.on('frame', (frame) => {
      if (!frame.type.startsWith('stream.')) return;
      const subscription = this.subscriptions.get(String(frame.stream));
      if (!subscription) return;
      if (frame.type === 'stream.data') subscription.deliver(frame as unknown as StreamMessage);
      else if (frame.type === 'stream.gap') subscription.reportGap(frame);
      else if (frame.type === 'stream.subscribed') subscription.onSubscribed(frame);
    });
  }

  /**
   * Subscribes (now if connected, else at the next welcome) and keeps the subscription across reconnects.
   * One subscription per stream name: subscribing again to a name returns the one there is.
   */
  subscribe(name: string, options: SubscribeOptions = {}): StreamSubscription {
    const existing = this.subscriptions.get(name);
    if (existing) return existing;
    this.leaving.delete(name);
    const subscription = new StreamSubscription(this.client, name, options, (s) => {
      if (this.subscriptions.get(s.name) !== s) return;
      this.subscriptions.delete(s.name);
      if (!this.client.connected) this.leaving.add(s.name);
    });
    this.subscriptions.set(name, subscription);
    subscription.sendIfNeeded();
    return subscription;
  }

  /** Publishes `data` (any JSON value) and resolves once the broker took it. */
  async publish(
    name: string,
    data: unknown,
    options: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<void> {
    await this.client.request({ type: 'stream.publish', stream: name, data }, options);
  }

  /** The stream names this client holds a subscription to. */
  names(): string[] {
    return [...this.subscriptions.keys()];
  }
}
