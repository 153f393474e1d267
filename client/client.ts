/**
 * The peer SDK: one logical session of a mesh member over a WebSocket that may be replaced many times.
 * It signs the hello, reconnects with backoff and jitter over a list of URLs, resumes (the broker
 * replays what is unacked), drops duplicate messages by messageId, acks, and matches replies to requests
 * by `rid`. It neither knows nor cares which node or phase it talks to.
 */
import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';
import { CloseCode, closeIsPermanent } from '../protocol/errors.js';
import type {
  ErrorFrame,
  Frame,
  Message,
  Peer,
  PeerJoined,
  PeerLeft,
  Sent,
  WatchTriggered,
  Welcome,
} from '../protocol/frames.js';
import { CookieJar } from './cookies.js';
import { RecentIds } from './dedup.js';
import { Emitter } from './emitter.js';
import { signHello } from './keys.js';
import { openSocket } from './socket.js';

export interface MeshClientOptions {
  /** WebSocket URLs (`ws://host:port/ws`), tried in turn; a load balancer URL alone is fine. */
  urls: string[];
  meshId: string;
  keys: { pubkey: string; secretKey: string };
  /** Stays the same across reconnects; a fresh UUID by default. */
  sessionId?: string;
  name?: string;
  groups?: string[];
  /** Ack each message once the `message` listeners ran (default true). */
  autoAck?: boolean;
  /** Default timeout of `request` (default 10 s). */
  requestTimeoutMs?: number;
  /** Reconnect after a lost connection (default on). */
  reconnect?: boolean;
  /** Backoff: first delay and cap; each attempt waits a random time up to min(cap, first × 2^attempt). */
  backoff?: { initialMs?: number; maxMs?: number };
  /**
   * Keep the cookies the load balancer sets on the upgrade and send them on every reconnect (default on), so
   * a sticky cookie brings the peer back to its node. Browsers do this themselves; this is for Node.
   */
  cookies?: boolean;
}

export interface ClientEvents {
  welcome: Welcome;
  message: Message;
  'watch.triggered': WatchTriggered;
  'peer.joined': PeerJoined;
  'peer.left': PeerLeft;
  /** Every frame the broker sends, including the ones with their own event. */
  frame: Frame;
  /** An error frame that answers no pending request. */
  error: ErrorFrame;
  /**
   * A connection ended. `permanent`: the broker refused the peer for good (bad key, unknown member,
   * revoked, session replaced or taken; `closeIsPermanent`), so the client stops; otherwise it was
   * transient (the node drained, failed, was full or busy, the network went) and the client reconnects
   * with backoff unless `reconnect` is off.
   */
  disconnected: { code: number; reason: string; willReconnect: boolean; permanent: boolean };
  reconnecting: { attempt: number; delayMs: number; url: string };
  /**
   * The client stopped for good: `close()` was called, `reconnect` is off, or the broker refused the
   * session (`permanent: true`, with the broker's close code and reason).
   */
  closed: ClientClosed;
}

/** Why a client stopped: what `closed` carries and `MeshClient.closedBy` keeps. */
export interface ClientClosed {
  code: number;
  reason: string;
  /** True when the broker refused the peer for good: connecting again would be refused again. */
  permanent: boolean;
}

/** An `error` frame in reply to a request, or a request that could not complete. */
export class MeshRequestError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
    this.name = 'MeshRequestError';
  }
}

/**
 * What a pending request or `connect()` rejects with once the client stopped (code `closed`): the close
 * that stopped it, and whether the broker refused the peer for good.
 */
export class MeshClosedError extends MeshRequestError {
  constructor(
    readonly closed: ClientClosed,
    message: string,
  ) {
    super('closed', message);
    this.name = 'MeshClosedError';
  }

  get permanent(): boolean {
    return this.closed.permanent;
  }
}

interface PendingRequest {
  frame: Frame;
  resolve: (reply: Frame) => void;
  reject: (error: Error) => void;
  timer: ReturnType<typeof setTimeout>;
  /** Sent again after a reconnect (idempotent requests only, such as `send` with its id). */
  retry: boolean;
  /** Written to a socket; a request made while disconnected waits for the next welcome. */
  written: boolean;
}

export class MeshClient extends Emitter<ClientEvents> {
  readonly sessionId: string;
  private socket: WebSocket | undefined;
  private welcome: Welcome | undefined;
  private readonly pending = new Map<string, PendingRequest>();
  private readonly seen = new RecentIds();
  /** Durable frames that arrived while nobody listened: held (and not acked) until a listener attaches. */
  private readonly unheard: Array<Message | WatchTriggered> = [];
  private nextRid = 1;
  private urlIndex = 0;
  private attempt = 0;
  private stopped = false;
  private stoppedBy: ClientClosed | undefined;
  private reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  private watchdog: ReturnType<typeof setInterval> | undefined;
  private lastFrameAt = 0;
  /** The load balancer's cookies (its sticky one pins us to our node); off with `cookies: false`. */
  private readonly cookies: CookieJar | undefined;
  private firstWelcome: { resolve: (w: Welcome) => void; reject: (e: Error) => void } | undefined;

  constructor(private readonly options: MeshClientOptions) {
    super();
    if (options.urls.length === 0) throw new Error('MeshClient needs at least one URL');
    this.sessionId = options.sessionId ?? randomUUID();
    this.cookies = options.cookies === false ? undefined : new CookieJar();
  }

  /** The node holding the current connection, once welcomed. */
  get node(): string | undefined {
    return this.welcome?.node;
  }

  /** Why the client stopped, once it has (`permanent` tells a refusal from a transient loss). */
  get closedBy(): ClientClosed | undefined {
    return this.stoppedBy;
  }

  get connected(): boolean {
    return this.welcome !== undefined && this.socket?.readyState === WebSocket.OPEN;
  }

  override on<K extends keyof ClientEvents>(
    event: K,
    listener: (payload: ClientEvents[K]) => void,
  ): () => void {
    const off = super.on(event, listener);
    if ((event === 'message' || event === 'watch.triggered') && this.unheard.length > 0) {
      // After the caller's current code has run, so it can attach its other listeners first.
      queueMicrotask(() => {
        for (const message of this.unheard.splice(0)) this.onDurable(message);
      });
    }
    return off;
  }

  /** Opens the session; resolves on the first `welcome`, rejects if the broker refuses the hello. */
  connect(): Promise<Welcome> {
    if (this.welcome) return Promise.resolve(this.welcome);
    // A closed client stays closed: connecting it again would open a socket nobody will close.
    if (this.stopped) {
      return Promise.reject(new MeshClosedError(this.stoppedBy!, 'the client was closed'));
    }
    const promise = new Promise<Welcome>((resolve, reject) => {
      this.firstWelcome = { resolve, reject };
    });
    this.open(false);
    return promise;
  }

  /** Sends a request and resolves with its reply; an `error` reply rejects with MeshRequestError. */
  request<T extends Frame = Frame>(
    frame: Frame,
    options: { timeoutMs?: number; retry?: boolean } = {},
  ): Promise<T> {
    const rid = `r${this.nextRid++}`;
    const outgoing = { ...frame, rid };
    return new Promise<T>((resolve, reject) => {
      const timeoutMs = options.timeoutMs ?? this.options.requestTimeoutMs ?? 10_000;
      const timer = setTimeout(() => {
        this.pending.delete(rid);
        reject(new MeshRequestError('timeout', `no reply to ${frame.type} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(rid, {
        frame: outgoing,
        resolve: resolve as (reply: Frame) => void,
        reject,
        timer,
        retry: options.retry ?? false,
        written: false,
      });
      if (this.connected) this.writeRequest(rid);
    });
  }

  /** A durable message. `id` makes a retry safe; the SDK retries across reconnects until a `sent`. */
  send(to: string, body: string, options: { id?: string; timeoutMs?: number } = {}): Promise<Sent> {
    const id = options.id ?? randomUUID();
    return this.request<Sent & Frame>(
      { type: 'send', id, to, body },
      { retry: true, timeoutMs: options.timeoutMs },
    );
  }

  ack(messageId: string): void {
    this.write({ type: 'ack', messageId });
  }

  async peers(): Promise<Peer[]> {
    // Every page (a large mesh lists in pages of at most 64 KiB).
    const peers: Peer[] = [];
    let cursor: string | undefined;
    do {
      const reply = await this.request<Frame & { peers: Peer[]; next?: string }>({
        type: 'peers.list',
        ...(cursor === undefined ? {} : { cursor }),
      });
      peers.push(...reply.peers);
      cursor = reply.next;
    } while (cursor !== undefined);
    return peers;
  }

  /** Writes a frame as is (no rid, no reply expected). Dropped when not connected. */
  write(frame: Frame): void {
    if (this.socket?.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(frame));
  }

  /** Ends the session for good: no reconnect; pending requests fail. */
  close(): void {
    this.stop(CloseCode.normal, 'client closed', false);
    this.socket?.close(CloseCode.normal, 'client closed');
  }

  private writeRequest(rid: string): void {
    const request = this.pending.get(rid);
    if (!request) return;
    request.written = true;
    this.write(request.frame);
  }

  private open(resume: boolean): void {
    const url = this.options.urls[this.urlIndex % this.options.urls.length]!;
    const socket = openSocket(url, this.cookies);
    this.socket = socket;
    socket.onopen = async () => {
      const { meshId, keys, name, groups } = this.options;
      // Awaited: the browser build's signHello (keys.webcrypto.ts) is asynchronous, Node's is not.
      let hello: Awaited<ReturnType<typeof signHello>>;
      try {
        hello = await signHello(keys, meshId, this.sessionId);
      } catch (error) {
        // Bad keys: every later attempt would fail the same way.
        this.stop(CloseCode.protocolAbuse, `cannot sign the hello: ${(error as Error).message}`, true);
        socket.close();
        return;
      }
      if (this.socket !== socket || socket.readyState !== WebSocket.OPEN) return;
      socket.send(
        JSON.stringify({
          type: 'hello',
          v: 1,
          ...hello,
          ...(name === undefined ? {} : { name }),
          ...(groups === undefined ? {} : { groups }),
          ...(resume ? { resume: {} } : {}),
        }),
      );
    };
    socket.onmessage = (event) => this.onFrame(String(event.data));
    socket.onerror = () => {}; // a close event always follows; handled there
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      this.onClose(event.code, event.reason);
    };
  }

  private onFrame(text: string): void {
    this.lastFrameAt = Date.now();
    let frame: Frame;
    try {
      frame = JSON.parse(text) as Frame;
    } catch {
      return;
    }
    this.emit('frame', frame);
    if (frame.rid !== undefined && frame.type !== 'welcome') {
      const request = this.pending.get(frame.rid);
      if (request) {
        this.pending.delete(frame.rid);
        clearTimeout(request.timer);
        if (frame.type === 'error') {
          const error = frame as unknown as ErrorFrame;
          request.reject(new MeshRequestError(error.code, error.message));
        } else request.resolve(frame);
        return;
      }
    }
    if (frame.type === 'welcome') this.onWelcome(frame as unknown as Welcome);
    else if (frame.type === 'message' || frame.type === 'watch.triggered') {
      this.onDurable(frame as unknown as Message | WatchTriggered);
    } else if (frame.type === 'peer.joined') this.emit('peer.joined', frame as unknown as PeerJoined);
    else if (frame.type === 'peer.left') this.emit('peer.left', frame as unknown as PeerLeft);
    else if (frame.type === 'error') this.emit('error', frame as unknown as ErrorFrame);
  }

  private onWelcome(welcome: Welcome): void {
    this.welcome = welcome;
    this.startWatchdog(welcome.heartbeatMs);
    this.attempt = 0;
    for (const [rid, request] of this.pending) if (request.retry || !request.written) this.writeRequest(rid);
    this.emit('welcome', welcome);
    this.firstWelcome?.resolve(welcome);
    this.firstWelcome = undefined;
  }

  /** A frame owed until acked (`message`, `watch.triggered`): deduplicated, emitted, then acked. */
  private onDurable(message: Message | WatchTriggered): void {
    if (this.listenerCount(message.type) === 0) {
      this.unheard.push(message);
      return;
    }
    const fresh = this.seen.add(message.messageId);
    if (fresh) {
      if (message.type === 'message') this.emit('message', message);
      else this.emit('watch.triggered', message);
    }
    // Acked even when a duplicate: the broker redelivers until it hears the ack.
    if (this.options.autoAck !== false) this.ack(message.messageId);
  }

  /**
   * Every heartbeat the client pings; a connection that has said nothing for two heartbeats is dead
   * (the network went away silently) and is replaced, as after any other loss.
   */
  private startWatchdog(heartbeatMs: number): void {
    clearInterval(this.watchdog);
    const socket = this.socket;
    this.watchdog = setInterval(() => {
      if (this.socket !== socket) return;
      if (Date.now() - this.lastFrameAt > 2 * heartbeatMs) {
        socket?.terminate();
        return;
      }
      this.write({ type: 'ping' });
    }, heartbeatMs);
  }

  private onClose(code: number, reason: string): void {
    clearInterval(this.watchdog);
    const wasWelcomed = this.welcome !== undefined;
    this.welcome = undefined;
    for (const [rid, request] of this.pending) {
      if (request.retry || !request.written) continue;
      this.pending.delete(rid);
      clearTimeout(request.timer);
      request.reject(new MeshRequestError('disconnected', `connection closed (${code}) before a reply`));
    }
    // A permanent refusal stops the client; anything else is transient and backs off (docs/protocol.md
    // § Errors and close codes): a full mesh, a busy or failing node must not end a session for good.
    const permanent = closeIsPermanent(code, reason);
    const willReconnect = !this.stopped && !permanent && this.options.reconnect !== false;
    if (!this.stopped) this.emit('disconnected', { code, reason, willReconnect, permanent });
    if (!willReconnect) {
      this.stop(code, reason, permanent);
      return;
    }
    // A draining node (1001) asks us to go elsewhere at once; anything else backs off.
    this.urlIndex++;
    const { initialMs = 100, maxMs = 5000 } = this.options.backoff ?? {};
    const delayMs =
      code === CloseCode.draining && wasWelcomed
        ? 0
        : Math.random() * Math.min(maxMs, initialMs * 2 ** this.attempt);
    this.attempt++;
    const url = this.options.urls[this.urlIndex % this.options.urls.length]!;
    this.emit('reconnecting', { attempt: this.attempt, delayMs, url });
    this.reconnectTimer = setTimeout(() => this.open(true), delayMs);
  }

  private stop(code: number, reason: string, permanent: boolean): void {
    if (this.stopped) return;
    this.stopped = true;
    const closed: ClientClosed = { code, reason, permanent };
    this.stoppedBy = closed;
    clearInterval(this.watchdog);
    clearTimeout(this.reconnectTimer);
    for (const request of this.pending.values()) {
      clearTimeout(request.timer);
      request.reject(new MeshClosedError(closed, `client closed (${code} ${reason})`));
    }
    this.pending.clear();
    const refusal = permanent ? 'connection refused for good' : 'connection closed';
    this.firstWelcome?.reject(new MeshClosedError(closed, `${refusal} (${code} ${reason})`));
    this.firstWelcome = undefined;
    this.emit('closed', closed);
  }
}
