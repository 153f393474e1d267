/**
 * The peer SDK: one logical session of a mesh member over a WebSocket that may be replaced many times.
 * It signs the hello, reconnects with backoff and jitter over a list of URLs, resumes (the broker
 * replays what is unacked), drops duplicate messages by messageId, acks, and matches replies to requests
 * by `rid`. It neither knows nor cares which node or phase it talks to. Its connection state machine is
 * documented in docs/sdk.md § States; streams, clock and MCP have their own small modules (streams.ts,
 * clock.ts, mcp.ts) built on the public `request`/`on` of this class.
 */
import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';
import { CloseCode, closeIsPermanent } from '../protocol/errors.js';
import type {
  ClockTick,
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
import { ClockApi } from './clock.js';
import { CookieJar } from './cookies.js';
import { RecentIds } from './dedup.js';
import { Emitter } from './emitter.js';
import {
  abortedError,
  type ClientClosed,
  type ConnectErrorCode,
  MeshClosedError,
  MeshConnectError,
  MeshRequestError,
} from './errors.js';
import { signHello } from './keys.js';
import { type MeshLogger, silentLogger } from './logger.js';
import { McpApi } from './mcp.js';
import { isOffline, watchNetwork } from './network.js';
import { backoffDelay, type ResolvedRetry, type RetryPolicy, resolveRetry } from './retry.js';
import type { RequestOptions } from './session.js';
import { openSocket } from './socket.js';
import { StreamsApi } from './streams.js';

export { type ClientClosed, MeshClosedError, MeshConnectError, MeshRequestError } from './errors.js';

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
  /** Reconnect policy: full-jitter backoff and a cap on attempts (retry.ts). */
  retry?: RetryPolicy;
  /** The older spelling of `retry.initialDelayMs` / `retry.maxDelayMs`, still accepted. */
  backoff?: { initialMs?: number; maxMs?: number };
  /**
   * Keep the cookies the load balancer sets on the upgrade and send them on every reconnect (default on), so
   * a sticky cookie brings the peer back to its node. Browsers do this themselves; this is for Node.
   */
  cookies?: boolean;
  /** Default timeout of `connect()` (default 30 s). */
  connectTimeoutMs?: number;
  /** Opt-in: where the SDK says what it does (state changes, reconnects, dropped frames). */
  logger?: MeshLogger;
  /**
   * Drop a message (or watch notification) whose messageId was already handed over, and a clock tick at or
   * before the last one (default true). `false` is for the chaos tests' planted bug `sdk-dedup-off` only: the
   * application then sees redeliveries.
   */
  dedup?: boolean;
}

/** docs/sdk.md § States has the machine as a table. */
export type ConnectionState = 'connecting' | 'connected' | 'disconnected' | 'suspended' | 'closed';

export interface StateChange {
  from: ConnectionState;
  to: ConnectionState;
  reason?: string;
}

/** What `connect()` takes. */
export interface ConnectOptions {
  /** Give up after this long without a welcome (default `connectTimeoutMs`, 30 s). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface ClientEvents {
  welcome: Welcome;
  message: Message;
  'watch.triggered': WatchTriggered;
  'peer.joined': PeerJoined;
  'peer.left': PeerLeft;
  /**
   * A `clock.tick` after the last one handed over: a tick at or before it (its tick not larger, its epoch
   * not newer) is dropped, as a session moving between nodes can get the tick in flight from both.
   */
  'clock.tick': ClockTick;
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
  /** Every move of the connection state machine. */
  state: StateChange;
}

interface PendingRequest {
  frame: Frame;
  resolve: (reply: Frame) => void;
  reject: (error: Error) => void;
  /** Clears the timer and the abort listener. */
  done: () => void;
  /** Sent again after a reconnect (idempotent requests only, such as `send` with its id). */
  retry: boolean;
  /** Written to a socket; a request made while disconnected waits for the next welcome. */
  written: boolean;
}

/** A `connect()` call waiting for a welcome. */
interface ConnectWaiter {
  resolve: (welcome: Welcome) => void;
  reject: (error: MeshConnectError) => void;
}

export class MeshClient extends Emitter<ClientEvents> {
  readonly sessionId: string;
  /** Typed stream subscriptions, restored after every reconnect (streams.ts). */
  readonly streams: StreamsApi;
  /** The mesh clock: ticks and its requests (clock.ts). */
  readonly clock: ClockApi;
  /** Hosting and calling peer MCP tools; hosted servers are registered again after every reconnect. */
  readonly mcp: McpApi;
  private socket: WebSocket | undefined;
  private welcome: Welcome | undefined;
  private readonly pending = new Map<string, PendingRequest>();
  private readonly seen = new RecentIds();
  /** Durable frames that arrived while nobody listened: held (and not acked) until a listener attaches. */
  private readonly unheard: Array<Message | WatchTriggered> = [];
  private readonly retry: ResolvedRetry;
  private readonly log: MeshLogger;
  private readonly waiters = new Set<ConnectWaiter>();
  private current: ConnectionState = 'disconnected';
  private nextRid = 1;
  private urlIndex = 0;
  /** Consecutive attempts without a welcome. */
  private attempt = 0;
  /** A socket of this run of attempts opened (so "no welcome" was not "no broker"). */
  private reached = false;
  private everWelcomed = false;
  private stopped = false;
  private stoppedBy: ClientClosed | undefined;
  private lastClose: ClientClosed | undefined;
  private reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  private watchdog: ReturnType<typeof setInterval> | undefined;
  private lastFrameAt = 0;
  /** The last tick handed to the application (onTick). */
  private lastTick: { tick: number; epoch: number } | undefined;
  /** The load balancer's cookies (its sticky one pins us to our node); off with `cookies: false`. */
  private readonly cookies: CookieJar | undefined;
  private unwatchNetwork: (() => void) | undefined;
  private welcomeCount = 0;

  constructor(private readonly options: MeshClientOptions) {
    super();
    if (options.urls.length === 0) throw new Error('MeshClient needs at least one URL');
    this.retry = resolveRetry(options.retry, options.backoff);
    this.log = options.logger ?? silentLogger;
    this.sessionId = options.sessionId ?? randomUUID();
    this.cookies = options.cookies === false ? undefined : new CookieJar();
    this.streams = new StreamsApi(this);
    this.clock = new ClockApi(this);
    this.mcp = new McpApi(this);
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

  /** Where the connection state machine is (docs/sdk.md § States). */
  get state(): ConnectionState {
    return this.current;
  }

  /** How many welcomes this client has had: a feature compares it to know what to send again. */
  get welcomes(): number {
    return this.welcomeCount;
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

  /**
   * Opens the session; resolves on the first `welcome`. Rejects with a MeshConnectError (its `code`:
   * unreachable, timeout, refused, aborted, closed) and then stops trying (state `suspended`, or
   * `closed` after a refusal); calling it again from `suspended` starts a fresh run of attempts.
   */
  connect(options: ConnectOptions = {}): Promise<Welcome> {
    if (this.welcome && this.connected) return Promise.resolve(this.welcome);
    // A closed client stays closed: connecting it again would open a socket nobody will close.
    if (this.stopped)
      return Promise.reject(this.connectError(this.stoppedBy!.permanent ? 'refused' : 'closed'));
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(this.connectError('aborted', signal));
    const timeoutMs = options.timeoutMs ?? this.options.connectTimeoutMs ?? 30_000;
    const promise = new Promise<Welcome>((resolve, reject) => {
      const finish = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.waiters.delete(waiter);
      };
      const waiter: ConnectWaiter = {
        resolve: (welcome) => {
          finish();
          resolve(welcome);
        },
        reject: (error) => {
          finish();
          reject(error);
        },
      };
      const giveUp = (error: MeshConnectError) => {
        waiter.reject(error);
        // The last caller waiting gave up: stop trying rather than leave sockets nobody awaits.
        if (this.waiters.size === 0 && !this.connected) this.suspend(error.code);
      };
      const onAbort = () => giveUp(this.connectError('aborted', signal));
      const timer = setTimeout(
        () => giveUp(this.connectError(this.reached ? 'timeout' : 'unreachable')),
        timeoutMs,
      );
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.add(waiter);
    });
    this.unwatchNetwork ??= watchNetwork({
      offline: () => this.suspend('offline'),
      online: () => this.reconnectNow('online'),
      visible: () => this.reconnectNow('page visible'),
    });
    if (this.current !== 'connecting' && this.current !== 'connected') this.reconnectNow('connect()');
    return promise;
  }

  /**
   * Sends a request and resolves with its reply; an `error` reply rejects with MeshRequestError (its
   * code), as do a timeout (`timeout`), a lost connection (`disconnected`) and the signal (`aborted`).
   */
  request<T extends Frame = Frame>(frame: Frame, options: RequestOptions = {}): Promise<T> {
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(abortedError(frame.type, signal));
    if (this.stopped) {
      return Promise.reject(new MeshClosedError(this.stoppedBy!, `client closed before ${frame.type}`));
    }
    const rid = `r${this.nextRid++}`;
    const outgoing = { ...frame, rid };
    return new Promise<T>((resolve, reject) => {
      const timeoutMs = options.timeoutMs ?? this.options.requestTimeoutMs ?? 10_000;
      const fail = (error: Error) => {
        if (!this.pending.delete(rid)) return;
        done();
        reject(error);
      };
      const onAbort = () => fail(abortedError(frame.type, signal!));
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const timer = setTimeout(
        () => fail(new MeshRequestError('timeout', `no reply to ${frame.type} within ${timeoutMs} ms`)),
        timeoutMs,
      );
      signal?.addEventListener('abort', onAbort, { once: true });
      this.pending.set(rid, {
        frame: outgoing,
        resolve: resolve as (reply: Frame) => void,
        reject,
        done,
        retry: options.retry ?? false,
        written: false,
      });
      if (this.connected) this.writeRequest(rid);
    });
  }

  /**
   * A durable message. `id` makes a retry safe; the SDK retries across reconnects until a `sent`. An
   * aborted send stops waiting; the message may still have been stored (send it again with its `id`).
   */
  send(
    to: string,
    body: string,
    options: { id?: string; timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<Sent> {
    const id = options.id ?? randomUUID();
    return this.request<Sent & Frame>(
      { type: 'send', id, to, body },
      { retry: true, timeoutMs: options.timeoutMs, signal: options.signal },
    );
  }

  ack(messageId: string): void {
    this.write({ type: 'ack', messageId });
  }

  async peers(options: { signal?: AbortSignal } = {}): Promise<Peer[]> {
    // Every page (a large mesh lists in pages of at most 64 KiB).
    const peers: Peer[] = [];
    let cursor: string | undefined;
    do {
      const reply = await this.request<Frame & { peers: Peer[]; next?: string }>(
        { type: 'peers.list', ...(cursor === undefined ? {} : { cursor }) },
        options,
      );
      peers.push(...reply.peers);
      cursor = reply.next;
    } while (cursor !== undefined);
    return peers;
  }

  /** Writes a frame as is (no rid, no reply expected). Dropped when not connected. */
  write(frame: Frame): void {
    if (this.socket?.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(frame));
  }

  /**
   * Leaves `disconnected` or `suspended` for a new attempt now, without waiting out the backoff (the
   * browser came online, the page became visible, or the app knows better). No-op otherwise.
   */
  reconnectNow(reason = 'reconnectNow()'): void {
    if (this.stopped || this.current === 'connecting' || this.current === 'connected') return;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    this.attempt = 0;
    this.reached = false;
    this.log.debug('mesh: reconnecting now', { reason });
    this.open(this.everWelcomed);
  }

  /** Ends the session for good: no reconnect; pending requests fail. */
  close(): void {
    const socket = this.socket;
    this.stop(CloseCode.normal, 'client closed', false);
    socket?.close(CloseCode.normal, 'client closed');
  }

  private writeRequest(rid: string): void {
    const request = this.pending.get(rid);
    if (!request) return;
    request.written = true;
    this.write(request.frame);
  }

  private setState(to: ConnectionState, reason?: string): void {
    const from = this.current;
    if (from === to) return;
    this.current = to;
    this.log.info(`mesh: ${from} → ${to}`, reason === undefined ? {} : { reason });
    this.emit('state', reason === undefined ? { from, to } : { from, to, reason });
  }

  private connectError(code: ConnectErrorCode, signal?: AbortSignal): MeshConnectError {
    const closed = this.stoppedBy ??
      this.lastClose ?? { code: 1006, reason: 'no connection', permanent: false };
    const why: Record<ConnectErrorCode, string> = {
      unreachable: `no broker reached at ${this.options.urls.join(', ')}`,
      timeout: 'no welcome in time',
      refused: 'the broker refused the hello',
      aborted: `connect aborted (${String(signal?.reason?.message ?? signal?.reason ?? 'aborted')})`,
      closed: 'the client was closed',
    };
    return new MeshConnectError(code, closed, `${why[code]} (last close ${closed.code} ${closed.reason})`);
  }

  private open(resume: boolean): void {
    if (isOffline()) {
      this.suspend('offline');
      return;
    }
    this.setState('connecting');
    const url = this.options.urls[this.urlIndex % this.options.urls.length]!;
    const socket = openSocket(url, this.cookies);
    this.socket = socket;
    socket.onopen = async () => {
      this.reached = true;
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
      this.log.warn('mesh: dropped a frame that is not JSON', { length: text.length });
      return;
    }
    this.emit('frame', frame);
    if (frame.rid !== undefined && frame.type !== 'welcome') {
      const request = this.pending.get(frame.rid);
      if (request) {
        this.pending.delete(frame.rid);
        request.done();
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
    else if (frame.type === 'clock.tick') this.onTick(frame as unknown as ClockTick);
    else if (frame.type === 'error') {
      this.log.warn('mesh: error frame', { code: frame.code, message: frame.message });
      this.emit('error', frame as unknown as ErrorFrame);
    }
  }

  private onWelcome(welcome: Welcome): void {
    this.welcome = welcome;
    this.welcomeCount++;
    this.everWelcomed = true;
    this.startWatchdog(welcome.heartbeatMs);
    this.attempt = 0;
    this.reached = false;
    this.lastClose = undefined;
    for (const [rid, request] of this.pending) if (request.retry || !request.written) this.writeRequest(rid);
    this.setState('connected', `welcomed by ${welcome.node}${welcome.resumed ? ' (resumed)' : ''}`);
    this.emit('welcome', welcome);
    for (const waiter of [...this.waiters]) waiter.resolve(welcome);
  }

  /**
   * A tick goes to the application only after the last one it got: the leader writes each tick once and in
   * order (docs/clock.md), but a session that moves between nodes can get the tick in flight twice, from
   * the node it left and, over the bus, from the node it joined. A new epoch with a lower tick (a restored
   * database) still passes.
   */
  private onTick(tick: ClockTick): void {
    const last = this.lastTick;
    if (last && tick.tick <= last.tick && tick.epoch <= last.epoch && this.options.dedup !== false) {
      this.log.debug('mesh: dropped a clock tick already handed over', {
        tick: tick.tick,
        epoch: tick.epoch,
      });
      return;
    }
    this.lastTick = { tick: tick.tick, epoch: tick.epoch };
    this.emit('clock.tick', tick);
  }

  /** A frame owed until acked (`message`, `watch.triggered`): deduplicated, emitted, then acked. */
  private onDurable(message: Message | WatchTriggered): void {
    if (this.listenerCount(message.type) === 0) {
      this.unheard.push(message);
      return;
    }
    const fresh = this.seen.add(message.messageId);
    if (fresh || this.options.dedup === false) {
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

  /** The connection is gone (closed by the broker, the network, or us): what waited on it fails. */
  private dropConnection(code: number): boolean {
    clearInterval(this.watchdog);
    const wasWelcomed = this.welcome !== undefined;
    this.welcome = undefined;
    this.socket = undefined;
    for (const [rid, request] of this.pending) {
      if (request.retry || !request.written) continue;
      this.pending.delete(rid);
      request.done();
      request.reject(new MeshRequestError('disconnected', `connection closed (${code}) before a reply`));
    }
    return wasWelcomed;
  }

  private onClose(code: number, reason: string): void {
    const wasWelcomed = this.dropConnection(code);
    // A permanent refusal stops the client; anything else is transient and backs off (docs/protocol.md
    // § Errors and close codes): a full mesh, a busy or failing node must not end a session for good.
    const permanent = closeIsPermanent(code, reason);
    const willReconnect = !this.stopped && !permanent && this.options.reconnect !== false;
    this.lastClose = { code, reason, permanent };
    if (!this.stopped) this.emit('disconnected', { code, reason, willReconnect, permanent });
    if (!willReconnect) {
      // With `reconnect: false` a connect() that got no welcome failed to reach a broker, not closed.
      this.stop(code, reason, permanent, permanent ? 'refused' : wasWelcomed ? 'closed' : 'unreachable');
      return;
    }
    if (!wasWelcomed) this.attempt++;
    if (this.attempt >= this.retry.maxAttempts) {
      this.suspend(
        `${this.attempt} attempts without a welcome (last close ${code} ${reason})`,
        'unreachable',
      );
      return;
    }
    this.scheduleReconnect(code === CloseCode.draining && wasWelcomed, `${code} ${reason}`);
  }

  /** Waits out the backoff (none after a drain: the node asked us to go elsewhere at once), then opens. */
  private scheduleReconnect(atOnce: boolean, reason: string): void {
    this.urlIndex++;
    const delayMs = atOnce ? 0 : backoffDelay(this.retry, Math.max(0, this.attempt - 1));
    const url = this.options.urls[this.urlIndex % this.options.urls.length]!;
    this.setState('disconnected', reason);
    this.log.debug('mesh: reconnect scheduled', { attempt: this.attempt + 1, delayMs, url });
    this.emit('reconnecting', { attempt: this.attempt + 1, delayMs, url });
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      this.open(true);
    }, delayMs);
  }

  /**
   * Stops trying until `connect()`, `reconnectNow()`, the browser going online or the page becoming
   * visible. `rejectWith`: the connect() calls waiting fail with that code (the attempts ran out).
   */
  private suspend(reason: string, rejectWith?: ConnectErrorCode): void {
    if (this.stopped) return;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    const socket = this.socket;
    if (socket) {
      this.dropConnection(CloseCode.normal);
      socket.close(CloseCode.normal, 'client suspended');
    }
    this.setState('suspended', reason);
    if (rejectWith) for (const waiter of [...this.waiters]) waiter.reject(this.connectError(rejectWith));
  }

  private stop(
    code: number,
    reason: string,
    permanent: boolean,
    waiterCode: ConnectErrorCode = permanent ? 'refused' : 'closed',
  ): void {
    if (this.stopped) return;
    this.stopped = true;
    const closed: ClientClosed = { code, reason, permanent };
    this.stoppedBy = closed;
    clearInterval(this.watchdog);
    clearTimeout(this.reconnectTimer);
    this.unwatchNetwork?.();
    for (const request of this.pending.values()) {
      request.done();
      request.reject(new MeshClosedError(closed, `client closed (${code} ${reason})`));
    }
    this.pending.clear();
    const refusal = permanent ? 'connection refused for good' : 'connection closed';
    for (const waiter of [...this.waiters]) {
      waiter.reject(new MeshConnectError(waiterCode, closed, `${refusal} (${code} ${reason})`));
    }
    this.setState('closed', `${code} ${reason}`);
    this.emit('closed', closed);
  }
}
