import type { WebSocket } from 'ws';
import { RecentIds } from '../../client/dedup.js';
import type { DurableFrame } from '../../protocol/frames.js';
import type { SessionIdentity } from '../../protocol/routes.js';
import type { Logger } from '../log.js';

/** Who a socket is (`SessionIdentity`) and what it is owed (`DurableFrame`) are the protocol's types. */
export type { DurableFrame, SessionIdentity };

/** Above this many buffered bytes a peer is too slow to keep up; it is closed rather than buffered forever. */
const MAX_BUFFERED_BYTES = 8 * 1024 * 1024;

let nextConnectionId = 1;

/**
 * One WebSocket of this node. Owns the socket's outbound side: framing, backpressure and the ordering of
 * durable messages while the backlog of a new session is being replayed (live messages that arrive during
 * the catch-up wait behind it, so a recipient sees each sender's messages in order).
 */
export class Connection {
  readonly id = nextConnectionId++;
  readonly openedAt = Date.now();
  identity: SessionIdentity | undefined;
  /** Set once the node has started the session's work (see Gateway); undone when the socket goes. */
  welcomed = false;
  /** Cleared when a ping goes out, set by the pong: a socket still false at the next ping is dead. */
  alive = true;
  private catchingUp: DurableFrame[] | undefined;
  private readonly sentDuringCatchUp = new Set<string>();
  /** Durable frames recently written to this socket, so a sweep does not send them again. */
  private readonly delivered = new RecentIds(10_000);

  constructor(
    readonly socket: WebSocket,
    readonly log: Logger,
  ) {}

  get isOpen(): boolean {
    return this.socket.readyState === this.socket.OPEN;
  }

  /** Whether this socket was already sent the durable frame `messageId` (recent ones only). */
  hasDelivered(messageId: string): boolean {
    return this.delivered.has(messageId);
  }

  send(frame: object): void {
    if (this.isOpen) this.sendText(JSON.stringify(frame));
  }

  /** A frame already serialized: one frame fanned out to many sockets is serialized once. */
  sendText(text: string): void {
    if (!this.isOpen) return;
    if (this.socket.bufferedAmount > MAX_BUFFERED_BYTES) {
      this.log.warn({ connection: this.id }, 'peer too slow to read its frames; closing');
      this.close(1008, 'too slow');
      return;
    }
    this.socket.send(text);
  }

  /** Delivers a durable message now, or after the backlog replay when one is running. */
  deliver(message: DurableFrame): void {
    if (this.catchingUp) this.catchingUp.push(message);
    else this.sendDurable(message);
  }

  /** Whether a backlog replay is running (live messages are waiting behind it). */
  get catchingUpNow(): boolean {
    return this.catchingUp !== undefined;
  }

  /** From now until `endCatchUp`, live messages wait; the backlog goes out through `replay`. Call before
   * the connection becomes visible to delivery. */
  beginCatchUp(): void {
    this.catchingUp = [];
    this.sentDuringCatchUp.clear();
  }

  replay(message: DurableFrame): void {
    this.sentDuringCatchUp.add(message.messageId);
    this.sendDurable(message);
  }

  /** Sends what arrived live during the replay, minus what the replay already sent. */
  endCatchUp(): void {
    const waiting = this.catchingUp ?? [];
    this.catchingUp = undefined;
    for (const message of waiting)
      if (!this.sentDuringCatchUp.has(message.messageId)) this.sendDurable(message);
    this.sentDuringCatchUp.clear();
  }

  private sendDurable(message: DurableFrame): void {
    this.delivered.add(message.messageId);
    this.send(message);
  }

  close(code: number, reason: string): void {
    if (this.socket.readyState === this.socket.CLOSED || this.socket.readyState === this.socket.CLOSING)
      return;
    this.socket.close(code, reason);
  }
}
