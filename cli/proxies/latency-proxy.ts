/**
 * A latency proxy: a TCP proxy on 127.0.0.1 in front of one upstream host:port that forwards both
 * directions byte for byte, each chunk delayed by a one-way delay plus a seeded jitter. It stands in for
 * the link between two simulated regions (`workbench up --phase 4`): this sandbox has network namespaces
 * but no netem qdisc, so the delay is made in user space.
 *
 * What it guarantees:
 * - Bytes are delivered unchanged and, within one direction of one connection, in order: a chunk is sent
 *   at max(its own due time, the previous chunk's send time), so jitter stretches gaps but never reorders.
 *   A chunk is never sent before its due time (timers that fire early are re-armed).
 * - Each chunk read at time t is due at t + delayMs + a draw in [0, jitterMs): the delay is a floor, so
 *   a request/response round trip through the proxy takes at least 2 × delayMs.
 * - `setDelay()` changes the delay and jitter of the chunks read from then on (chunks already waiting keep
 *   their due times; order still holds).
 * - `cut()` partitions the link the way a cable pulled between two regions does, not the way a crashed
 *   host does: established connections stay open and simply stall (bytes are held, not delivered, and the
 *   senders are back-pressured once the buffers fill, as a TCP send window would be), and new connections
 *   are accepted but get no upstream connection and no byte until `restore()`: the client's connect
 *   completes (it is the proxy's own listener that answers), then nothing comes back, as a SYN lost in a
 *   partition looks to anyone with a timeout. `restore()` heals it: held bytes go out in order (late ones
 *   at once, no retransmission back-off is modelled) and held connections connect upstream. Whoever wants
 *   the "connection died" outcome gets it from its own timeouts (keepalives, statement timeouts), which is
 *   what a real partition tests.
 * - `cut('to-upstream')` / `cut('to-client')` is a one-way partition: only the bytes of that direction are
 *   held (the other direction flows), as when one side's packets are dropped by a firewall rule and the
 *   other's pass. A connection made during any cut gets no upstream connection until `restore()` (a
 *   handshake needs both directions). `cut(direction, { marked: true })` holds only connections `mark`
 *   accepted (e.g. a Redis connection that subscribed: one node's pub/sub path, not its other traffic).
 * - Bounded memory: each direction of each connection holds at most `maxBufferedBytes` waiting to be sent
 *   (plus the one chunk already read when the limit is crossed, at most a socket read, 64 KiB); past it
 *   the reading side is paused and resumed once the queue drains, and a receiver that does not read pauses
 *   the queue in turn. So a slow or cut link back-pressures the sender instead of growing without bound.
 *   This also caps throughput at about maxBufferedBytes per one-way delay, as a TCP window does.
 * - Counters: connections accepted and open, bytes delivered each way, bytes waiting now.
 * - `close()` destroys every connection and stops listening.
 *
 * What it does not model: packet loss, bandwidth limits, retransmission, MTU or segment boundaries (chunks
 * are whatever the sockets read), or the TCP handshake's own round trip (the first data bytes carry the
 * delay, not the connect). A FIN travels in order behind the data (delayed like it); an error or reset on
 * one side destroys the other side at once, even while cut.
 */
import { createServer, type Server, Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { Random } from '../fuzz/random.js';
import { closeProxy, finish, listenOnLoopback } from './loopback.js';

export interface LatencyProxyOptions {
  /** Where connections are forwarded: `host:port`, or host and port (host default 127.0.0.1). */
  upstream: string | { host?: string; port: number };
  /** One-way delay in milliseconds added to every chunk, each way (default 0). */
  delayMs?: number;
  /** Extra delay drawn per chunk from [0, jitterMs) (default 0). Never reorders bytes. */
  jitterMs?: number;
  /** Seed of the jitter draws (default 1): the same chunks in the same order get the same jitter. */
  seed?: number;
  /** The port to listen on, on 127.0.0.1 (default: a free one). */
  port?: number;
  /** Bytes one direction of one connection may hold waiting to be sent before its reader is paused. */
  maxBufferedBytes?: number;
  /**
   * Marks a connection whose client sent a chunk this accepts (checked on each client chunk until one is):
   * what `cut(direction, { marked: true })` acts on.
   */
  mark?: (clientChunk: Buffer) => boolean;
}

/** Which bytes a cut holds: both ways, or only client → upstream, or only upstream → client. */
export type CutDirection = 'both' | 'to-upstream' | 'to-client';
export const CUT_DIRECTIONS: readonly CutDirection[] = ['both', 'to-upstream', 'to-client'];

export interface CutOptions {
  /** Only connections `mark` accepted (default: every connection). */
  marked?: boolean;
}

export interface LatencyProxyStats {
  /** Client connections accepted so far, and open now. */
  connections: number;
  open: number;
  /** Bytes delivered client → upstream and upstream → client. */
  bytesToUpstream: number;
  bytesToClient: number;
  /** Bytes read and not yet delivered, over every connection and both directions. */
  bufferedBytes: number;
  /** The link is cut (`cut()` without a `restore()` since). */
  cut: boolean;
  /** Which direction is held, while cut. */
  cutDirection?: CutDirection;
  /** Connections `mark` accepted, open now. */
  marked: number;
}

/** Longer than any inter-region delay worth simulating; a larger number is a unit mistake (seconds?). */
export const MAX_DELAY_MS = 10_000;
export const MAX_JITTER_MS = 10_000;
/** Default per-direction buffer: about a Linux TCP window, enough for replication bursts at 40 ms. */
export const DEFAULT_MAX_BUFFERED_BYTES = 4 * 1024 * 1024;

/** A bad option: thrown by `start` before anything listens. */
export class LatencyProxyOptionError extends Error {
  override name = 'LatencyProxyOptionError';
}

function checkMs(name: string, value: number, max: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > max)
    throw new LatencyProxyOptionError(
      `${name} must be a number of milliseconds from 0 to ${max}, not ${value}`,
    );
  return value;
}

function checkPort(name: string, value: number, min: number): number {
  if (!Number.isInteger(value) || value < min || value > 65535)
    throw new LatencyProxyOptionError(`${name} must be an integer from ${min} to 65535, not ${value}`);
  return value;
}

function upstreamOf(upstream: LatencyProxyOptions['upstream']): { host: string; port: number } {
  if (typeof upstream === 'object' && upstream !== null)
    return { host: upstream.host || '127.0.0.1', port: checkPort('upstream port', upstream.port, 1) };
  const match = typeof upstream === 'string' ? /^(.*):([^:]*)$/.exec(upstream) : null;
  if (!match)
    throw new LatencyProxyOptionError(
      `upstream must be host:port or { host, port }, not ${String(upstream)}`,
    );
  const port = /^[0-9]+$/.test(match[2]!) ? Number(match[2]) : Number.NaN;
  return {
    host: match[1]!.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1',
    port: checkPort('upstream port', port, 1),
  };
}

/** What one side of the link waits to send: data, or the FIN that follows it. */
type Item = { due: number; bytes: Buffer } | { due: number; end: true };

/**
 * One direction of one connection: reads from `source`, holds each chunk until it is due, writes it to
 * `target`. The queue is in due order by construction (due = max(own, last)), so only its head is timed.
 */
class DelayedPipe {
  private readonly queue: Item[] = [];
  private head = 0;
  private lastDue = 0;
  private queued = 0;
  private timer: NodeJS.Timeout | undefined;
  /** The target said "enough" (write returned false): wait for its drain. */
  private blocked = false;
  private pausedSource = false;
  /** The FIN is queued (the source ended or closed), delivered, and the source is closed for good. */
  private ended = false;
  private endDelivered = false;
  private sourceGone = false;

  constructor(
    private readonly link: LatencyProxy,
    private readonly source: Socket,
    private readonly target: Socket,
    private readonly delivered: (bytes: number) => void,
    private readonly holds: () => boolean,
    onChunk: (chunk: Buffer) => void = () => {},
  ) {
    source.on('data', (chunk: Buffer) => {
      onChunk(chunk);
      this.push({ due: this.dueTime(), bytes: chunk });
    });
    source.on('end', () => this.end());
    target.on('drain', () => {
      this.blocked = false;
      this.flush();
    });
  }

  get bufferedBytes(): number {
    return this.queued;
  }

  /** Sends what is due (when the link is up and the target takes it), and times the next one. */
  flush(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.holds() || this.blocked || this.target.destroyed) return;
    const now = performance.now();
    let wrote = false;
    while (this.head < this.queue.length) {
      const item = this.queue[this.head]!;
      if (item.due > now) {
        // setTimeout may fire up to a millisecond early: round up, and `flush` checks again anyway.
        this.timer = setTimeout(() => this.flush(), Math.max(1, Math.ceil(item.due - now)));
        break;
      }
      this.head++;
      if ('end' in item) {
        this.endDelivered = true;
        // A source that is gone will read nothing more: the target is done once its last bytes are out.
        if (this.sourceGone) finish(this.target);
        else this.target.end();
        continue;
      }
      if (!wrote) this.target.cork(); // chunks due together leave in one write
      wrote = true;
      this.queued -= item.bytes.length;
      this.delivered(item.bytes.length);
      if (!this.target.write(item.bytes)) {
        this.blocked = true;
        break;
      }
    }
    if (wrote) this.target.uncork();
    this.compact();
    if (this.pausedSource && this.queued < this.link.maxBufferedBytes) {
      this.pausedSource = false;
      this.source.resume();
    }
  }

  /**
   * The source closed without an error: its FIN follows its data if it did not come already, and the
   * target is finished once that FIN is delivered (at once, if it was).
   */
  sourceClosed(): void {
    this.sourceGone = true;
    if (!this.ended) this.end();
    else if (this.endDelivered) finish(this.target);
  }

  /** Drops everything waiting (the connection is gone). */
  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.queue.length = 0;
    this.head = 0;
    this.queued = 0;
  }

  private dueTime(): number {
    this.lastDue = Math.max(performance.now() + this.link.drawDelay(), this.lastDue);
    return this.lastDue;
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    this.push({ due: this.dueTime(), end: true });
  }

  private push(item: Item): void {
    this.queue.push(item);
    if ('bytes' in item) this.queued += item.bytes.length;
    if (this.queued >= this.link.maxBufferedBytes && !this.pausedSource) {
      this.pausedSource = true;
      this.source.pause();
    }
    // Only a new head needs a timer: a later item is behind the head's timer already.
    if (this.head === this.queue.length - 1 && !this.timer) this.flush();
  }

  /** Keeps the array from growing: shift the sent prefix off once it is most of it. */
  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
    }
  }
}

/** One client connection and its own upstream connection, with a delayed pipe each way. */
class LinkedConnection {
  readonly upstream = new Socket({ allowHalfOpen: true });
  private readonly pipes: DelayedPipe[];
  private connected = false;
  private closed = 0;
  /** `mark` accepted one of the client's chunks. */
  marked = false;

  constructor(
    private readonly link: LatencyProxy,
    readonly client: Socket,
    private readonly address: { host: string; port: number },
    counters: { bytesToUpstream: number; bytesToClient: number },
    onClosed: (connection: LinkedConnection) => void,
  ) {
    client.setNoDelay(true);
    const mark = link.mark;
    this.pipes = [
      new DelayedPipe(
        link,
        client,
        this.upstream,
        (n) => {
          counters.bytesToUpstream += n;
        },
        // Nothing goes up before there is an upstream connection (one made during a cut waits for the heal).
        () => !this.connected || link.holds('to-upstream', this),
        mark &&
          ((chunk) => {
            if (!this.marked && mark(chunk)) this.marked = true;
          }),
      ),
      new DelayedPipe(
        link,
        this.upstream,
        client,
        (n) => {
          counters.bytesToClient += n;
        },
        () => link.holds('to-client', this),
      ),
    ];
    for (const [side, pipe] of [
      [client, this.pipes[0]!],
      [this.upstream, this.pipes[1]!],
    ] as const) {
      side.on('error', () => this.destroy());
      side.on('close', (hadError) => {
        if (hadError) this.destroy();
        // Never connected (closed while the link was cut): there is nobody upstream to tell.
        else if (!this.connected) this.upstream.destroy();
        else pipe.sourceClosed();
        if (++this.closed === 2) {
          for (const pipe of this.pipes) pipe.stop();
          onClosed(this);
        }
      });
    }
    // Given up before the link came back: it never reached upstream, so there is nothing to tell anyone.
    client.on('end', () => {
      if (!this.connected) this.destroy();
    });
    // A connection accepted while the link is cut gets its upstream connection on `restore()`.
    if (!link.holdsConnects) this.connectUpstream();
  }

  get bufferedBytes(): number {
    return this.pipes[0]!.bufferedBytes + this.pipes[1]!.bufferedBytes;
  }

  /** Link is up (again): connect if not yet, and send what is due. */
  resume(): void {
    if (!this.connected && !this.link.holdsConnects) this.connectUpstream();
    for (const pipe of this.pipes) pipe.flush();
  }

  destroy(): void {
    for (const pipe of this.pipes) pipe.stop();
    this.client.destroy();
    this.upstream.destroy();
  }

  private connectUpstream(): void {
    if (this.connected || this.client.destroyed || this.client.readableEnded) return;
    this.connected = true;
    // `connect` marks the socket connecting at once, so writes from here on are buffered until it is.
    this.upstream.connect({ host: this.address.host, port: this.address.port });
    this.upstream.setNoDelay(true);
  }
}

export class LatencyProxy {
  /** @internal */
  readonly mark: ((clientChunk: Buffer) => boolean) | undefined;
  private delay: number;
  private jitter: number;
  private partitioned = false;
  private direction: CutDirection = 'both';
  private cutMarkedOnly = false;
  private readonly random: Random;
  private readonly connections = new Set<LinkedConnection>();
  private readonly counters = { connections: 0, bytesToUpstream: 0, bytesToClient: 0 };
  private closing: Promise<void> | undefined;
  private listeningPort = 0;

  private constructor(
    private readonly server: Server,
    private readonly upstream: { host: string; port: number },
    options: LatencyProxyOptions,
    readonly maxBufferedBytes: number,
  ) {
    this.mark = options.mark;
    this.delay = options.delayMs ?? 0;
    this.jitter = options.jitterMs ?? 0;
    this.random = new Random(options.seed ?? 1);
    server.on('connection', (socket) => this.accept(socket));
    server.on('error', () => {}); // e.g. EMFILE on accept: that client's connection fails, no more
  }

  /**
   * Checks every option (a LatencyProxyOptionError names the bad one, before anything listens), listens on
   * 127.0.0.1 (a free port unless `port`) and resolves once it accepts connections.
   */
  static async start(options: LatencyProxyOptions): Promise<LatencyProxy> {
    const upstream = upstreamOf(options.upstream);
    checkMs('delayMs', options.delayMs ?? 0, MAX_DELAY_MS);
    checkMs('jitterMs', options.jitterMs ?? 0, MAX_JITTER_MS);
    if (options.port !== undefined) checkPort('port', options.port, 0);
    if (options.seed !== undefined && !Number.isInteger(options.seed))
      throw new LatencyProxyOptionError(`seed must be an integer, not ${options.seed}`);
    const max = options.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED_BYTES;
    if (!Number.isInteger(max) || max < 1)
      throw new LatencyProxyOptionError(`maxBufferedBytes must be a positive integer, not ${max}`);
    const server = createServer({ allowHalfOpen: true });
    const proxy = new LatencyProxy(server, upstream, options, max);
    proxy.listeningPort = await listenOnLoopback(server, options.port);
    return proxy;
  }

  get port(): number {
    return this.listeningPort;
  }

  /** `127.0.0.1:<port>`: what to give clients instead of the upstream's address. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get delayMs(): number {
    return this.delay;
  }

  get jitterMs(): number {
    return this.jitter;
  }

  get isCut(): boolean {
    return this.partitioned;
  }

  /** The delay and jitter of every chunk read from now on (validated as at start). */
  setDelay(delayMs: number, jitterMs = this.jitter): void {
    checkMs('delayMs', delayMs, MAX_DELAY_MS);
    checkMs('jitterMs', jitterMs, MAX_JITTER_MS);
    this.delay = delayMs;
    this.jitter = jitterMs;
  }

  /**
   * Partitions the link until `restore()`: the bytes of `direction` (default both) are held, and no upstream
   * connection is made; with `marked`, only connections `mark` accepted are held (new ones connect). A
   * second cut replaces the first.
   */
  cut(direction: CutDirection = 'both', options: CutOptions = {}): void {
    if (!CUT_DIRECTIONS.includes(direction))
      throw new LatencyProxyOptionError(
        `cut direction must be one of ${CUT_DIRECTIONS.join(', ')}, not ${direction}`,
      );
    if (options.marked && !this.mark)
      throw new LatencyProxyOptionError('cut({ marked: true }) needs the mark option at start');
    const before = this.partitioned;
    this.partitioned = true;
    this.direction = direction;
    this.cutMarkedOnly = !!options.marked;
    // A direction (or a connection) no longer held sends what waited in it.
    if (before) for (const connection of this.connections) connection.resume();
  }

  /** @internal Whether bytes going `way` on `connection` are held now. */
  holds(way: 'to-upstream' | 'to-client', connection: { marked: boolean }): boolean {
    if (!this.partitioned) return false;
    if (this.cutMarkedOnly && !connection.marked) return false;
    return this.direction === 'both' || this.direction === way;
  }

  /** @internal Whether a new upstream connection must wait (a handshake needs both ways). */
  get holdsConnects(): boolean {
    return this.partitioned && !this.cutMarkedOnly;
  }

  /** Heals the link: held bytes go out in order, held connections connect upstream. */
  restore(): void {
    if (!this.partitioned) return;
    this.partitioned = false;
    for (const connection of this.connections) connection.resume();
  }

  stats(): LatencyProxyStats {
    let bufferedBytes = 0;
    for (const connection of this.connections) bufferedBytes += connection.bufferedBytes;
    let marked = 0;
    for (const connection of this.connections) if (connection.marked) marked++;
    return {
      ...this.counters,
      open: this.connections.size,
      bufferedBytes,
      cut: this.partitioned,
      ...(this.partitioned ? { cutDirection: this.direction } : {}),
      marked,
    };
  }

  /** Ends every connection (both sides) and the server; resolves when it no longer listens. */
  close(): Promise<void> {
    this.closing ??= closeProxy(this.server, this.connections);
    return this.closing;
  }

  /** @internal The one-way delay of the next chunk: the delay plus one seeded jitter draw. */
  drawDelay(): number {
    return this.jitter > 0 ? this.delay + this.random.next() * this.jitter : this.delay;
  }

  private accept(socket: Socket): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    this.counters.connections++;
    const connection = new LinkedConnection(this, socket, this.upstream, this.counters, (c) =>
      this.connections.delete(c),
    );
    this.connections.add(connection);
  }
}
