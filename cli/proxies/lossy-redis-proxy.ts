/**
 * A lossy Redis proxy: a TCP proxy on 127.0.0.1 in front of one Redis server that forwards both directions
 * byte for byte, except that it silently drops a seeded share of `PUBLISH` and `SPUBLISH` commands and
 * answers each dropped one itself with `:0\r\n` (the integer reply of "no subscriber got it"). The publisher
 * sees an ordinary reply, its connection never drops, and the subscribers simply never get the message:
 * the bus losing a publish without anyone noticing a disconnect (`workbench chaos`, fault `bus-loss`).
 *
 * Four modules, one job each: this one (sockets: listening, one upstream connection per client, reply
 * order, back-pressure, closing), resp-request-parser.ts (client → server framing), resp-reply-scanner.ts
 * (server → client framing) and publish-loss.ts (which publishes are lost).
 *
 * How it works, per client connection:
 * - client → server: a streaming RESP request parser (multibulk and inline commands, pipelined, split
 *   anywhere across TCP chunks, binary safe) that follows Redis's own framing rules (networking.c). A
 *   command is forwarded as soon as its name shows it is not a publish; a `PUBLISH channel message` is held
 *   whole until complete, then forwarded or dropped (one seeded draw per publish that could be dropped).
 * - reply order: the connection keeps a queue of what the client is owed, in command order: runs of
 *   "N replies from Redis" and the proxy's own `:0` replies. A server → client RESP scanner (RESP2 and
 *   RESP3, pushes and attributes not counted as replies) counts the replies as they pass; when the queue's
 *   head is a reply of the proxy's own, it is written right after the last reply Redis owed before it, so
 *   a dropped publish in the middle of a pipeline is answered exactly where Redis would have answered it.
 *   Server bytes are never held back: they are forwarded as they come, and fake replies are only ever
 *   inserted at a frame boundary.
 * - where replies stop matching commands one to one (SUBSCRIBE/PSUBSCRIBE/SSUBSCRIBE, MONITOR, SYNC, PSYNC,
 *   CLIENT REPLY) or the client sends bytes it cannot parse (Redis will answer them with a protocol error),
 *   the connection becomes *untracked*: everything is forwarded as it is from there on and nothing is
 *   dropped on it (the proxy's replies still owed before that point are delivered in place first).
 * - inside MULTI … EXEC a publish is never dropped (Redis would answer `+QUEUED`, and EXEC the count).
 * A connection to the proxy is one connection to Redis; when either side closes, so does the other.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { closeProxy, finish, listenOnLoopback } from './loopback.js';
import { type ChannelFilter, PublishLoss } from './publish-loss.js';
import { ReplyScanner } from './resp-reply-scanner.js';
import { type PublishPolicy, RequestParser, type RequestSink } from './resp-request-parser.js';

export interface LossyRedisProxyOptions {
  /** The Redis server behind the proxy: `redis://host:port`, or host and port. */
  upstream: string | { host?: string; port: number };
  /** Share of the matching publishes dropped, from 0 to 1 (default 0); `lossRate` changes it at runtime. */
  lossRate?: number;
  /** Seed of the drop decisions (default 1): the same publishes in the same order meet the same fate. */
  seed?: number;
  /** Only publishes to channels that match can be dropped (default: every channel). */
  channels?: ChannelFilter;
  /** The port to listen on, on 127.0.0.1 (default: a free one). */
  port?: number;
}

export interface LossyRedisProxyStats {
  /** Client connections accepted so far, and open now. */
  connections: number;
  open: number;
  /** PUBLISH / SPUBLISH commands seen (any channel), forwarded to Redis, and dropped (answered `:0`). */
  publishes: number;
  forwarded: number;
  dropped: number;
  /** Connections the proxy stopped parsing (subscribers, MONITOR, CLIENT REPLY, bytes it cannot parse). */
  untracked: number;
}

/** One client connection and its own connection to Redis. */
class ProxyConnection implements RequestSink {
  readonly upstream: Socket;
  private readonly parser: RequestParser;
  private readonly scanner = new ReplyScanner();
  /**
   * What the client is owed, in order: a number of replies Redis will send, a reply of the proxy's own, or
   * `null`: from here on every byte Redis sends goes through uncounted.
   */
  private readonly owed: Array<number | Buffer | null> = [];
  private passthrough = false;
  private closed = 0;

  constructor(
    private readonly proxy: LossyRedisProxy,
    readonly client: Socket,
    upstream: { host: string; port: number },
    policy: PublishPolicy,
    private readonly onClosed: (connection: ProxyConnection) => void,
  ) {
    this.parser = new RequestParser(this, policy);
    this.upstream = connect({ host: upstream.host, port: upstream.port, allowHalfOpen: true });
    client.setNoDelay(true);
    this.upstream.setNoDelay(true);
    client.on('data', (chunk: Buffer) => this.guard(() => this.parser.push(chunk)));
    this.upstream.on('data', (chunk: Buffer) => this.guard(() => this.fromServer(chunk)));
    // Back-pressure both ways: a side that cannot keep up pauses the other.
    this.upstream.on('drain', () => client.resume());
    client.on('drain', () => this.upstream.resume());
    for (const [side, other] of [
      [client, this.upstream],
      [this.upstream, client],
    ] as const) {
      side.on('end', () => other.end());
      side.on('error', () => this.destroy());
      side.on('close', (hadError) => {
        if (hadError) this.destroy();
        else finish(other);
        if (++this.closed === 2) this.onClosed(this);
      });
    }
  }

  destroy(): void {
    this.client.destroy();
    this.upstream.destroy();
  }

  forward(bytes: Buffer): void {
    if (bytes.length === 0 || this.upstream.destroyed || this.upstream.writableEnded) return;
    if (!this.upstream.write(bytes)) this.client.pause();
  }

  expectReply(): void {
    const last = this.owed.length - 1;
    if (last >= 0 && typeof this.owed[last] === 'number') this.owed[last] = (this.owed[last] as number) + 1;
    else this.owed.push(1);
  }

  fakeReply(bytes: Buffer): void {
    this.owed.push(bytes);
    if (this.scanner.atBoundary) this.flushOwed();
  }

  untracked(): void {
    this.proxy.countUntracked();
    this.owed.push(null);
    if (this.scanner.atBoundary) this.flushOwed();
  }

  private toClient(bytes: Buffer): void {
    if (bytes.length === 0 || this.client.destroyed || this.client.writableEnded) return;
    if (!this.client.write(bytes)) this.upstream.pause();
  }

  /** Writes the proxy's replies at the head of the queue (nothing from Redis is owed before them). */
  private flushOwed(): void {
    while (this.owed.length > 0 && typeof this.owed[0] !== 'number') {
      const head = this.owed.shift() as Buffer | null;
      if (head === null) {
        this.passthrough = true;
        this.owed.length = 0;
        return;
      }
      this.toClient(head);
    }
  }

  private fromServer(chunk: Buffer): void {
    if (this.passthrough) {
      this.toClient(chunk);
      return;
    }
    let start = 0;
    const ok = this.scanner.scan(chunk, (end, counted) => {
      if (counted) {
        const head = this.owed[0];
        if (typeof head !== 'number') {
          // A reply no command of ours asked for: the count is lost, so stop dropping on this connection.
          this.loseTrack();
          return false;
        }
        if (head > 1) this.owed[0] = head - 1;
        else this.owed.shift();
      }
      if (this.owed.length > 0 && typeof this.owed[0] !== 'number') {
        this.toClient(chunk.subarray(start, end));
        start = end;
        this.flushOwed();
      }
      return !this.passthrough;
    });
    this.toClient(chunk.subarray(start));
    if (!ok) {
      // Not RESP (no real Redis sends that): deliver what the proxy owes now, and stop interfering.
      const fakes = this.owed.filter((entry): entry is Buffer => entry instanceof Buffer);
      this.loseTrack();
      for (const fake of fakes) this.toClient(fake);
    }
  }

  private loseTrack(): void {
    if (!this.parser.untracked) this.proxy.countUntracked();
    this.passthrough = true;
    this.owed.length = 0;
    this.parser.abandon();
  }

  /** A bug must never take the proxy down: the connection is cut instead (the client reconnects). */
  private guard(work: () => void): void {
    try {
      work();
    } catch {
      this.destroy();
    }
  }
}

function upstreamOf(upstream: LossyRedisProxyOptions['upstream']): { host: string; port: number } {
  if (typeof upstream !== 'string') return { host: upstream.host ?? '127.0.0.1', port: upstream.port };
  const url = new URL(upstream);
  return { host: url.hostname || '127.0.0.1', port: Number(url.port || 6379) };
}

export class LossyRedisProxy {
  private readonly loss: PublishLoss;
  private readonly upstream: { host: string; port: number };
  private readonly connections = new Set<ProxyConnection>();
  private readonly counters = { connections: 0, untracked: 0 };
  private closing: Promise<void> | undefined;
  private listeningPort = 0;

  private constructor(
    private readonly server: Server,
    options: LossyRedisProxyOptions,
  ) {
    this.loss = new PublishLoss(options);
    this.upstream = upstreamOf(options.upstream);
    server.on('connection', (socket) => this.accept(socket));
    server.on('error', () => {}); // e.g. EMFILE on accept: the client sees its connection fail, no more
  }

  /** Listens on 127.0.0.1 (a free port unless `port`) and resolves once it accepts connections. */
  static async start(options: LossyRedisProxyOptions): Promise<LossyRedisProxy> {
    const server = createServer({ allowHalfOpen: true });
    const proxy = new LossyRedisProxy(server, options);
    proxy.listeningPort = await listenOnLoopback(server, options.port);
    return proxy;
  }

  get port(): number {
    return this.listeningPort;
  }

  /** The URL to give Redis clients instead of the server's. */
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** The share of matching publishes dropped from now on (0 to 1). */
  get lossRate(): number {
    return this.loss.lossRate;
  }

  set lossRate(rate: number) {
    this.loss.lossRate = rate;
  }

  stats(): LossyRedisProxyStats {
    return { ...this.counters, ...this.loss.stats(), open: this.connections.size };
  }

  /** Ends every connection (both sides) and the server; resolves when it no longer listens. */
  close(): Promise<void> {
    this.closing ??= closeProxy(this.server, this.connections);
    return this.closing;
  }

  /** @internal */
  countUntracked(): void {
    this.counters.untracked++;
  }

  private accept(socket: Socket): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    this.counters.connections++;
    const connection = new ProxyConnection(this, socket, this.upstream, this.loss.decide, (c) =>
      this.connections.delete(c),
    );
    this.connections.add(connection);
  }
}
