/**
 * The client → server half of the lossy Redis proxy (lossy-redis-proxy.ts): a streaming parser of Redis
 * requests (multibulk and inline commands, pipelined, split anywhere across TCP chunks, binary safe) that
 * follows Redis's own framing rules (networking.c). It tells its sink, in order, which bytes to forward,
 * which commands Redis owes a reply for, and where the connection stops being one reply per command. A
 * command is forwarded as soon as its name shows it is not a publish; a `PUBLISH channel message` is held
 * whole until complete, then handed to the policy (publish-loss.ts decides) and forwarded or dropped.
 * Inside MULTI … EXEC a publish is never eligible (Redis would answer `+QUEUED`, and EXEC the count).
 * No sockets here: the parser only sees buffers.
 */
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
