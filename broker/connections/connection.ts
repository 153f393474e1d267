import type { Socket } from 'node:net';
import type { WebSocket } from 'ws';
import { CloseCode } from '../../protocol/errors.js';
import type { DurableFrame } from '../../protocol/frames.js';
import type { SessionIdentity } from '../../protocol/routes.js';
import type { Logger } from '../log.js';

/** Who a socket is (`SessionIdentity`) and what it is owed (`DurableFrame`) are the protocol's types. */
export type { DurableFrame, SessionIdentity };

/**
 * What the node buffers for peers that read slowly, all sockets together: each socket may hold its share
 * of it (within the two bounds below). Past its share a peer is too slow to keep up; it is closed rather
 * than buffered forever. What it is owed is in Postgres and replayed when it comes back; what else it
 * missed (stream data, events) was best effort.
 */
export const NODE_OUTBOUND_BUDGET = 64 * 1024 * 1024;
const MAX_BUFFERED_BYTES = 4 * 1024 * 1024;
/** Enough for the largest frame the node sends (a 32 KiB body in its envelope, a 64 KiB list page). */
const MIN_BUFFERED_BYTES = 512 * 1024;
/**
 * Above this many buffered bytes the socket is congested: its feed stops writing durable frames and its
 * next request is not handled until the peer has read its way back under it. A peer that does not read
 * therefore makes the node hold about this much for it, whatever it asks for.
 */
export const OUTBOUND_HIGH_WATER = 1024 * 1024;
/**
 * A congested socket is looked at again when its TCP socket drains, or after this long at the latest: what
 * ws still holds in its own sender queue (a frame being compressed) drains without a TCP 'drain' event.
 */
const DRAIN_RECHECK_MS = 100;
/**
 * How long a revoked member's socket may take to answer its 4403 close frame before it is cut. ws would
 * wait 30 s, and reads (and hands over) frames meanwhile; the gateway refuses them (`revoked`), and the
 * socket goes within this bound whatever the peer does.
 */
export const REVOKED_CLOSE_GRACE_MS = 500;

let nextConnectionId = 1;

/**
 * The session's ordered feed as its connection carries it: the gateway starts and closes it, delivery wakes
 * it (delivery/feed.ts's SessionFeed is the one implementation). Declared here, on the floor below the rows,
 * so that a connection does not import the row that writes to it.
 */
export interface ConnectionFeed {
  start(): Promise<void>;
  /** Something may be owed; `hint` is the item the waker knows about, if any. */
  wake(hint?: { seq: number; frame: DurableFrame }, path?: 'local' | 'remote'): void;
  /** The member's last seq in Postgres is past what this feed has dealt with. */
  behind(lastSeq: number): boolean;
  close(): void;
}

/**
 * One WebSocket of this node. Owns the socket's outbound side: framing and backpressure. Durable frames
 * reach it only through its session's feed (delivery/feed.ts), which keeps their order. It is the feed's
 * `FeedSocket` by shape (isOpen, congested, whenDrained, writeDurable), checked where node/sessions.ts
 * opens a SessionFeed on it: naming the interface here would import delivery/ from below.
 */
export class Connection {
  readonly id = nextConnectionId++;
  readonly openedAt = Date.now();
  identity: SessionIdentity | undefined;
  /** The session's ordered feed, set when its hello is accepted (before delivery can see the socket). */
  feed: ConnectionFeed | undefined;
  /** Set once the node has started the session's work (see Gateway); undone when the socket goes. */
  welcomed = false;
  /** Cleared when a ping goes out, set by the pong: a socket still false at the next ping is dead. */
  alive = true;
  /** Set once its member is known revoked: no frame of it is handled again (the gateway checks). */
  revoked = false;
  private corked = false;
  /**
   * Frames for this socket between its hello's acceptance and its `welcome`: a session's first frame is its
   * welcome (docs/protocol.md § hello), yet the socket is in the mesh's fan-out from the moment it is added
   * (presence events, ticks, stream data of a resumed subscription), so what the mesh says meanwhile waits
   * here, in order, bounded like the socket's own buffer. Undefined when nothing is held.
   */
  private held: { frames: string[]; bytes: number } | undefined;

  constructor(
    readonly socket: WebSocket,
    /** The source address the socket came from (the load balancer's, behind one). */
    readonly remote: string,
    readonly log: Logger,
    /** How many sockets this node holds: they share NODE_OUTBOUND_BUDGET. */
    private readonly socketsOnNode: () => number = () => 1,
  ) {}

  /** This socket's share of the node's outbound budget. */
  private get bufferLimit(): number {
    const share = NODE_OUTBOUND_BUDGET / Math.max(1, this.socketsOnNode());
    return Math.min(MAX_BUFFERED_BYTES, Math.max(MIN_BUFFERED_BYTES, share));
  }

  get isOpen(): boolean {
    return this.socket.readyState === this.socket.OPEN;
  }

  /** The peer is behind on reading (see OUTBOUND_HIGH_WATER). */
  get congested(): boolean {
    // Half the socket's share at most: a feed that stops here never reaches the close bound.
    return this.socket.bufferedAmount > Math.min(OUTBOUND_HIGH_WATER, this.bufferLimit / 2);
  }

  /**
   * Resolves once the socket is no longer congested, or is closed. Woken by the TCP socket's 'drain' (or
   * its close) rather than a poll: a node with many slow readers would otherwise run a timer per socket
   * every few milliseconds.
   */
  async whenDrained(): Promise<void> {
    while (this.congested && this.isOpen) {
      const raw = this.rawSocket();
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          raw?.off('drain', wake);
          raw?.off('close', wake);
          resolve();
        };
        const timer = setTimeout(wake, DRAIN_RECHECK_MS);
        raw?.once('drain', wake);
        raw?.once('close', wake);
      });
    }
  }

  /** The TCP socket under the WebSocket (ws keeps it as `_socket`; absent before open and after close). */
  private rawSocket(): Socket | undefined {
    return (this.socket as unknown as { _socket?: Socket })._socket;
  }

  send(frame: object): void {
    if (this.isOpen) this.sendText(JSON.stringify(frame));
  }

  /** A frame already serialized: one frame fanned out to many sockets is serialized once. */
  sendText(text: string): void {
    if (!this.isOpen) return;
    if (this.held) {
      this.hold(text);
      return;
    }
    // Counted with the frame about to be written: one large frame must not take the buffer past its bound.
    if (this.socket.bufferedAmount + text.length > this.bufferLimit) {
      this.log.warn({ connection: this.id }, 'peer too slow to read its frames; closing');
      this.close(1008, 'too slow');
      return;
    }
    this.cork();
    this.socket.send(text);
  }

  /** From now until `sendWelcome`, frames are held (see `held`). */
  holdUntilWelcome(): void {
    this.held ??= { frames: [], bytes: 0 };
  }

  /** The session's welcome, then what was held for it, in the order it came. */
  sendWelcome(welcome: object): void {
    const held = this.held;
    this.held = undefined;
    this.send(welcome);
    for (const text of held?.frames ?? []) this.sendText(text);
  }

  private hold(text: string): void {
    const held = this.held as { frames: string[]; bytes: number };
    // The same bound as a written frame: a mesh that says more than the socket may buffer before its
    // welcome closes it as too slow, rather than holding without limit.
    if (held.bytes + text.length > this.bufferLimit) {
      this.held = undefined;
      this.log.warn({ connection: this.id }, 'too much held for a socket before its welcome; closing');
      this.close(1008, 'too slow');
      return;
    }
    held.frames.push(text);
    held.bytes += text.length;
  }

  /**
   * Frames written in the same tick leave in one write: a commit answers many pipelined sends of a socket
   * at once, and a feed writes a page of messages; one syscall per frame was the node's largest cost.
   */
  private cork(): void {
    if (this.corked) return;
    const raw = this.rawSocket();
    if (!raw) return;
    this.corked = true;
    raw.cork();
    setImmediate(() => {
      this.corked = false;
      raw.uncork();
    });
  }

  /** The feed's one way out. */
  writeDurable(frame: DurableFrame): void {
    this.send(frame);
  }

  /** Its member was revoked: refuse its frames from now on, close 4403, cut it if it does not answer. */
  revoke(): void {
    this.revoked = true;
    this.close(CloseCode.memberRevoked, 'member revoked');
    const cut = setTimeout(() => {
      if (this.socket.readyState !== this.socket.CLOSED) this.socket.terminate();
    }, REVOKED_CLOSE_GRACE_MS);
    cut.unref();
  }

  close(code: number, reason: string): void {
    if (this.socket.readyState === this.socket.CLOSED || this.socket.readyState === this.socket.CLOSING)
      return;
    this.socket.close(code, reason);
  }
}
