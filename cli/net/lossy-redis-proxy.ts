/**
 * A lossy Redis proxy: a TCP proxy on 127.0.0.1 in front of one Redis server that forwards both directions
 * byte for byte, except that it silently drops a seeded share of `PUBLISH` and `SPUBLISH` commands and
 * answers each dropped one itself with `:0\r\n` (the integer reply of "no subscriber got it"). The publisher
 * sees an ordinary reply, its connection never drops, and the subscribers simply never get the message:
 * the bus losing a publish without anyone noticing a disconnect (`workbench chaos`, fault `bus-loss`).
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
import { Random } from '../fuzz/random.js';
import { closeProxy, finish, listenOnLoopback } from './loopback.js';

/** Which channels a publish may be dropped on: a substring, a pattern, or a predicate. */
export type ChannelFilter = string | RegExp | ((channel: string) => boolean);

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

const STAR = 0x2a;
const DOLLAR = 0x24;
const CR = 0x0d;
const LF = 0x0a;
const EMPTY = Buffer.alloc(0);
/** Redis's limits (PROTO_INLINE_MAX_SIZE, the multibulk limit, proto-max-bulk-len's default). */
const MAX_INLINE = 64 * 1024;
const MAX_MULTIBULK = 1024 * 1024;
const MAX_BULK = 512 * 1024 * 1024;
/** Longer than any command name: a longer first argument is not one the proxy cares about. */
const MAX_NAME = 64;
/** Redis's answer to a publish nobody received. */
export const DROPPED_REPLY = Buffer.from(':0\r\n');

const PUBLISH_COMMANDS = new Set(['PUBLISH', 'SPUBLISH']);
/** After one of these, replies no longer match commands one to one: the connection is left alone. */
const UNTRACKED_COMMANDS = new Set(['SUBSCRIBE', 'PSUBSCRIBE', 'SSUBSCRIBE', 'MONITOR', 'SYNC', 'PSYNC']);

/** What the request parser does with a client's bytes, in order. */
export interface RequestSink {
  /** Bytes for Redis. */
  forward(bytes: Buffer): void;
  /** A forwarded command is complete: Redis owes one reply for it. */
  expectReply(): void;
  /** A dropped command: the proxy owes this reply, after every reply owed before it. */
  fakeReply(bytes: Buffer): void;
  /** From here on the connection is forwarded as it is (replies no longer counted, nothing dropped). */
  untracked(): void;
}

/** Decides a complete publish's fate: true drops it. `eligible` is false inside MULTI (never dropped). */
export type PublishPolicy = (channel: Buffer, eligible: boolean) => boolean;

type RequestPhase = 'idle' | 'inline' | 'count' | 'bulkStart' | 'bulkHeader' | 'bulkBody';

/**
 * The client → server side of one connection: a streaming parser of Redis requests with Redis's framing
 * (a `*` starts a multibulk request, anything else an inline one; the byte after a header's `\r` and the
 * two after a bulk payload are skipped unseen, as Redis does). Bytes are handed on as soon as it is known
 * they are not part of a publish; a publish is held until it is complete and the policy has decided.
 */
export class RequestParser {
  private raw = false;
  private phase: RequestPhase = 'idle';
  private chunk: Buffer = EMPTY;
  /** Start of the current chunk's bytes not handed on (forwarded or held) yet. */
  private segStart = 0;
  /** The current command's bytes held back (until its name, or for a publish until it is complete). */
  private held: Buffer[] = [];
  /** The current command is being forwarded as it comes. */
  private streaming = false;
  private inlineBytes = 0;
  private header = '';
  private afterCR = false;
  private argc = 0;
  private argIndex = 0;
  private bulkLen = 0;
  private bulkLeft = 0;
  private capture: Buffer[] | undefined;
  private keepArg1 = false;
  private name = '';
  private arg1: Buffer | undefined;
  private inMulti = false;

  constructor(
    private readonly sink: RequestSink,
    private readonly policy: PublishPolicy,
  ) {}

  /** The parser gave up on this connection: bytes go through as they are. */
  get untracked(): boolean {
    return this.raw;
  }

  push(chunk: Buffer): void {
    if (this.raw) {
      if (chunk.length > 0) this.sink.forward(chunk);
      return;
    }
    this.chunk = chunk;
    this.segStart = 0;
    let i = 0;
    while (i < chunk.length && !this.raw) i = this.step(chunk, i);
    if (!this.raw) this.handOn(chunk.length);
    this.chunk = EMPTY;
  }

  /**
   * Stops parsing (the reply side lost track): what is held of a partial command is forwarded, and so is
   * everything after it. Called between chunks.
   */
  abandon(): void {
    if (this.raw) return;
    this.raw = true;
    const bytes = Buffer.concat(this.held);
    this.held = [];
    if (bytes.length > 0) this.sink.forward(bytes);
  }

  private step(chunk: Buffer, i: number): number {
    switch (this.phase) {
      case 'idle':
        this.begin();
        if (chunk[i] === STAR) {
          this.phase = 'count';
          this.startHeader();
          return i + 1;
        }
        this.phase = 'inline';
        return i;
      case 'inline':
        return this.stepInline(chunk, i);
      case 'count':
      case 'bulkHeader':
        return this.stepHeader(chunk, i);
      case 'bulkStart':
        if (chunk[i] !== DOLLAR) return this.giveUp(); // Redis: "expected '$', got …"
        this.phase = 'bulkHeader';
        this.startHeader();
        return i + 1;
      case 'bulkBody':
        return this.stepBody(chunk, i);
    }
  }

  private begin(): void {
    this.held = [];
    this.streaming = false;
    this.inlineBytes = 0;
    this.argc = 0;
    this.argIndex = 0;
    this.capture = undefined;
    this.keepArg1 = false;
    this.name = '';
    this.arg1 = undefined;
  }

  private startHeader(): void {
    this.header = '';
    this.afterCR = false;
  }

  /** Hands the current chunk's bytes up to `end` on: forwarded when streaming, else held. */
  private handOn(end: number): void {
    if (end <= this.segStart) return;
    const part = this.chunk.subarray(this.segStart, end);
    this.segStart = end;
    if (this.streaming) this.sink.forward(part);
    else this.held.push(part);
  }

  /** Bytes it cannot parse: everything from the current command on goes to Redis as it is, untracked. */
  private giveUp(): number {
    const bytes = Buffer.concat([...this.held, this.chunk.subarray(this.segStart)]);
    this.held = [];
    this.segStart = this.chunk.length;
    this.raw = true;
    this.sink.untracked();
    if (bytes.length > 0) this.sink.forward(bytes);
    return this.chunk.length;
  }

  private stepInline(chunk: Buffer, i: number): number {
    const lf = chunk.indexOf(LF, i);
    const end = lf === -1 ? chunk.length : lf + 1;
    // Redis looks for the newline with strchr, which a NUL byte stops: not an inline request it would run.
    if (chunk.subarray(i, end).includes(0)) return this.giveUp();
    this.inlineBytes += end - i;
    if (lf === -1) return this.inlineBytes > MAX_INLINE ? this.giveUp() : chunk.length;
    this.handOn(end);
    const bytes = Buffer.concat(this.held);
    let stop = bytes.length - 1;
    if (stop > 0 && bytes[stop - 1] === CR) stop--;
    const args = splitArgs(bytes.subarray(0, stop));
    if (args === undefined) {
      // Unbalanced quotes: Redis answers a protocol error and closes the connection.
      this.held = [bytes];
      return this.giveUp();
    }
    this.held = [];
    this.phase = 'idle';
    if (args.length === 0) {
      this.sink.forward(bytes); // an empty line: Redis runs nothing and answers nothing
      return end;
    }
    this.complete(args[0]!.toString('latin1').toUpperCase(), args.length, args[1], bytes);
    return end;
  }

  private stepHeader(chunk: Buffer, i: number): number {
    for (; i < chunk.length; i++) {
      if (this.afterCR) {
        this.afterCR = false;
        return this.headerDone(i + 1);
      }
      const c = chunk[i]!;
      if (c === CR) {
        this.afterCR = true;
        continue;
      }
      // Only an integer parses (string2ll): anything else is a protocol error for Redis too.
      if ((c < 0x30 || c > 0x39) && c !== 0x2d) return this.giveUp();
      if (this.header.length >= 20) return this.giveUp();
      this.header += String.fromCharCode(c);
    }
    return i;
  }

  private headerDone(next: number): number {
    if (!/^(0|-?[1-9][0-9]*)$/.test(this.header)) return this.giveUp();
    const n = Number(this.header);
    if (this.phase === 'count') {
      if (n > MAX_MULTIBULK) return this.giveUp();
      if (n <= 0) {
        // `*0` or `*-1`: Redis runs nothing and answers nothing.
        this.handOn(next);
        const bytes = Buffer.concat(this.held);
        this.held = [];
        this.phase = 'idle';
        this.sink.forward(bytes);
        return next;
      }
      this.argc = n;
      this.argIndex = 0;
      this.phase = 'bulkStart';
      return next;
    }
    if (n < 0 || n > MAX_BULK) return this.giveUp();
    this.bulkLen = n;
    this.bulkLeft = n + 2;
    this.phase = 'bulkBody';
    const wanted = this.argIndex === 0 ? n <= MAX_NAME : this.argIndex === 1 && this.keepArg1;
    this.capture = wanted ? [] : undefined;
    return next;
  }

  private stepBody(chunk: Buffer, i: number): number {
    const n = Math.min(this.bulkLeft, chunk.length - i);
    const payload = Math.min(n, Math.max(0, this.bulkLeft - 2));
    if (this.capture && payload > 0) this.capture.push(chunk.subarray(i, i + payload));
    this.bulkLeft -= n;
    i += n;
    if (this.bulkLeft > 0) return i;
    const value = this.capture ? Buffer.concat(this.capture, this.bulkLen) : undefined;
    this.capture = undefined;
    if (this.argIndex === 0) {
      this.name = value ? value.toString('latin1').toUpperCase() : '';
      this.keepArg1 = (PUBLISH_COMMANDS.has(this.name) && this.argc === 3) || this.name === 'CLIENT';
      if (!this.keepArg1) {
        // Not a publish: forward what was held, and the rest of the command as it comes.
        this.handOn(i);
        this.streaming = true;
        const bytes = Buffer.concat(this.held);
        this.held = [];
        this.sink.forward(bytes);
      }
    } else if (this.argIndex === 1) {
      this.arg1 = value;
    }
    this.argIndex++;
    if (this.argIndex < this.argc) {
      this.phase = 'bulkStart';
      return i;
    }
    this.handOn(i);
    const bytes = this.streaming ? undefined : Buffer.concat(this.held);
    this.held = [];
    this.phase = 'idle';
    this.complete(this.name, this.argc, this.arg1, bytes);
    return i;
  }

  /** A complete command; `bytes` when it was held (a publish, CLIENT, inline), undefined when streamed. */
  private complete(name: string, argc: number, arg1: Buffer | undefined, bytes: Buffer | undefined): void {
    this.phase = 'idle';
    if (bytes && argc === 3 && PUBLISH_COMMANDS.has(name) && this.policy(arg1 ?? EMPTY, !this.inMulti)) {
      this.sink.fakeReply(DROPPED_REPLY);
      return;
    }
    if (bytes) this.sink.forward(bytes);
    if (
      UNTRACKED_COMMANDS.has(name) ||
      (name === 'CLIENT' && arg1?.toString('latin1').toUpperCase() === 'REPLY')
    ) {
      this.giveUp(); // nothing is held now: the rest of the chunk, and all after it, as it is
      return;
    }
    if (name === 'MULTI') this.inMulti = true;
    else if (name === 'EXEC' || name === 'DISCARD' || name === 'RESET') this.inMulti = false;
    this.sink.expectReply();
  }
}

/** `\n \r \t \b \a` inside double quotes. */
const ESCAPES = new Map([
  [0x6e, 10],
  [0x72, 13],
  [0x74, 9],
  [0x62, 8],
  [0x61, 7],
]);
const isSpace = (c: number) => c === 0x20 || (c >= 0x09 && c <= 0x0d);
const isHex = (c: number) => (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);

/**
 * The arguments of an inline command, as Redis's sdssplitargs reads them (double quotes with `\n`, `\xHH`
 * escapes, single quotes, a closing quote must be followed by a space); undefined on unbalanced quotes.
 */
export function splitArgs(line: Buffer): Buffer[] | undefined {
  const at = (k: number) => (k < line.length ? line[k]! : 0);
  const args: Buffer[] = [];
  let p = 0;
  for (;;) {
    while (p < line.length && isSpace(line[p]!)) p++;
    if (p >= line.length) return args;
    let inDouble = false;
    let inSingle = false;
    let done = false;
    const current: number[] = [];
    while (!done) {
      const c = at(p);
      const end = p >= line.length;
      if (inDouble) {
        if (c === 0x5c && at(p + 1) === 0x78 && isHex(at(p + 2)) && isHex(at(p + 3))) {
          current.push(Number.parseInt(String.fromCharCode(at(p + 2), at(p + 3)), 16));
          p += 3;
        } else if (c === 0x5c && p + 1 < line.length) {
          p++;
          const e = at(p);
          current.push(ESCAPES.get(e) ?? e);
        } else if (c === 0x22 && !end) {
          if (p + 1 < line.length && !isSpace(at(p + 1))) return undefined;
          done = true;
        } else if (end) {
          return undefined;
        } else {
          current.push(c);
        }
      } else if (inSingle) {
        if (c === 0x5c && at(p + 1) === 0x27) {
          p++;
          current.push(0x27);
        } else if (c === 0x27 && !end) {
          if (p + 1 < line.length && !isSpace(at(p + 1))) return undefined;
          done = true;
        } else if (end) {
          return undefined;
        } else {
          current.push(c);
        }
      } else if (end || c === 0x20 || c === LF || c === CR || c === 0x09) {
        done = true;
      } else if (c === 0x22) {
        inDouble = true;
      } else if (c === 0x27) {
        inSingle = true;
      } else {
        current.push(c);
      }
      if (p < line.length) p++;
    }
    args.push(Buffer.from(current));
  }
}

type ReplyPhase = 'type' | 'line' | 'bulk';
/** RESP2 and RESP3 type bytes: one-line values, length-prefixed values, and aggregates. */
const LINE_TYPES = new Set([0x2b, 0x2d, 0x3a, 0x5f, 0x2c, 0x23, 0x28]); // + - : _ , # (
const BULK_TYPES = new Set([0x24, 0x21, 0x3d]); // $ ! =
const ARRAY_TYPES = new Set([0x2a, 0x7e, 0x3e]); // * ~ >
const MAP = 0x25; // %
const ATTRIBUTE = 0x7c; // |
const PUSH = 0x3e; // >

/** How scanning goes on after a step: on, stopped by the caller, or not RESP. */
type Scan = 'on' | 'stop' | 'bad';

/**
 * The server → client side: finds where each top-level reply ends in the stream of bytes Redis sends,
 * across chunks, without holding any of them. Push frames (`>`) and attributes (`|`) are not replies.
 */
export class ReplyScanner {
  private phase: ReplyPhase = 'type';
  private readonly stack: Array<{ left: number; attribute: boolean }> = [];
  private lineType = 0;
  private line = '';
  private bulkLeft = 0;
  private topIsPush = false;
  /** A top-level attribute was read: the reply it belongs to comes next. */
  private pendingAttribute = false;

  /** Between two top-level replies (where a reply of the proxy's own may go). */
  get atBoundary(): boolean {
    return this.phase === 'type' && this.stack.length === 0 && !this.pendingAttribute;
  }

  /**
   * Calls `frame(end, counted)` for each top-level frame that ends in `chunk` (`end` just past it;
   * `counted` false for a push); stops when `frame` returns false. Returns false on bytes that are not RESP.
   */
  scan(chunk: Buffer, frame: (end: number, counted: boolean) => boolean): boolean {
    let i = 0;
    while (i < chunk.length) {
      let next: Scan = 'on';
      if (this.phase === 'type') {
        const t = chunk[i++]!;
        if (this.stack.length === 0) this.topIsPush = t === PUSH;
        if (!LINE_TYPES.has(t) && !BULK_TYPES.has(t) && !ARRAY_TYPES.has(t) && t !== MAP && t !== ATTRIBUTE)
          return false;
        this.lineType = t;
        this.line = '';
        this.phase = 'line';
      } else if (this.phase === 'line') {
        const lf = chunk.indexOf(LF, i);
        const end = lf === -1 ? chunk.length : lf;
        // Only lengths are read; a one-line value (`+OK`, an error) is just skipped to its newline.
        if (!LINE_TYPES.has(this.lineType)) {
          this.line += chunk.toString('latin1', i, end);
          if (this.line.length > 24) return false;
        }
        if (lf === -1) return true;
        i = lf + 1;
        this.phase = 'type';
        next = this.lineDone(i, frame);
      } else {
        const n = Math.min(this.bulkLeft, chunk.length - i);
        i += n;
        this.bulkLeft -= n;
        if (this.bulkLeft === 0) {
          this.phase = 'type';
          next = this.elementDone(i, frame);
        }
      }
      if (next === 'stop') return true;
      if (next === 'bad') return false;
    }
    return true;
  }

  /** A header or one-line value ended at `end`. */
  private lineDone(end: number, frame: (end: number, counted: boolean) => boolean): Scan {
    const t = this.lineType;
    if (LINE_TYPES.has(t)) return this.elementDone(end, frame);
    const text = this.line.endsWith('\r') ? this.line.slice(0, -1) : this.line;
    if (!/^-?[0-9]+$/.test(text)) return 'bad';
    const n = Number(text);
    if (BULK_TYPES.has(t)) {
      if (n < 0) return this.elementDone(end, frame); // a null
      this.bulkLeft = n + 2;
      this.phase = 'bulk';
      return 'on';
    }
    const entries = t === MAP || t === ATTRIBUTE ? 2 * n : n;
    if (entries > 0) {
      this.stack.push({ left: entries, attribute: t === ATTRIBUTE });
      return 'on';
    }
    if (t !== ATTRIBUTE) return this.elementDone(end, frame); // an empty aggregate, or a null one
    if (this.stack.length === 0) this.pendingAttribute = true;
    return 'on';
  }

  /** A value ended at `end`: it completes its aggregates, and maybe a top-level frame. */
  private elementDone(end: number, frame: (end: number, counted: boolean) => boolean): Scan {
    while (this.stack.length > 0) {
      const top = this.stack[this.stack.length - 1]!;
      if (--top.left > 0) return 'on';
      this.stack.pop();
      if (top.attribute) {
        // An attribute is not a value of its aggregate: the value it describes follows.
        if (this.stack.length === 0) this.pendingAttribute = true;
        return 'on';
      }
    }
    this.pendingAttribute = false;
    return frame(end, !this.topIsPush) ? 'on' : 'stop';
  }
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

function matcherOf(filter: ChannelFilter | undefined): (channel: string) => boolean {
  if (filter === undefined) return () => true;
  if (typeof filter === 'string') return (channel) => channel.includes(filter);
  if (filter instanceof RegExp) return (channel) => filter.test(channel);
  return filter;
}

function checkRate(rate: number): number {
  if (!Number.isFinite(rate) || rate < 0 || rate > 1)
    throw new RangeError(`lossRate must be from 0 to 1, not ${rate}`);
  return rate;
}

export class LossyRedisProxy {
  private rate: number;
  private readonly random: Random;
  private readonly matches: (channel: string) => boolean;
  private readonly upstream: { host: string; port: number };
  private readonly connections = new Set<ProxyConnection>();
  private readonly counters = { connections: 0, publishes: 0, forwarded: 0, dropped: 0, untracked: 0 };
  private closing: Promise<void> | undefined;
  private listeningPort = 0;

  private constructor(
    private readonly server: Server,
    options: LossyRedisProxyOptions,
  ) {
    this.rate = checkRate(options.lossRate ?? 0);
    this.random = new Random(options.seed ?? 1);
    this.matches = matcherOf(options.channels);
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
    return this.rate;
  }

  set lossRate(rate: number) {
    this.rate = checkRate(rate);
  }

  stats(): LossyRedisProxyStats {
    return { ...this.counters, open: this.connections.size };
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
    const connection = new ProxyConnection(this, socket, this.upstream, this.decide, (c) =>
      this.connections.delete(c),
    );
    this.connections.add(connection);
  }

  /** One seeded draw per publish that may be dropped (eligible, loss on, channel matching). */
  private readonly decide: PublishPolicy = (channel, eligible) => {
    this.counters.publishes++;
    const drop =
      eligible && this.rate > 0 && this.matches(channel.toString()) && this.random.next() < this.rate;
    if (drop) this.counters.dropped++;
    else this.counters.forwarded++;
    return drop;
  };
}
