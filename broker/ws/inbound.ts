/**
 * One socket's inbound side: the frames it sent, handled one at a time in the order sent, with two bounds
 * a sender cannot run around.
 *
 * - **Backpressure.** At most `maxQueued` frames wait; at that many the socket is no longer read (TCP
 *   pushes back on the sender) until half of them are done. A sender that writes faster than the node
 *   handles makes the node hold at most `maxQueued` frames of at most MAX_FRAME_BYTES each, not its whole
 *   stream.
 * - **Pace.** A token bucket of `burst` frames refilled at `ratePerSec`: a frame with no token waits for
 *   one (and so the queue fills and reading stops). Nothing is refused: a fast peer is slowed down, not cut
 *   off.
 * - **Replies read.** A frame is not handled while the socket's outbound side is congested (the peer is
 *   not reading what it was sent): a peer cannot pile up replies by asking without reading.
 *
 * Once the socket closed, nothing still queued runs: a frame is work for a peer that is there.
 */
import type { RawData, WebSocket } from 'ws';

export interface InboundLimits {
  /** Frames queued before the socket stops being read. */
  maxQueued: number;
  ratePerSec: number;
  burst: number;
}

export type FrameHandler = (data: RawData, isBinary: boolean) => Promise<void>;

export class InboundFrames {
  private tail: Promise<void> = Promise.resolve();
  private queued = 0;
  private reading = true;
  private closed = false;
  private tokens: number;
  private refilledAt = Date.now();

  constructor(
    private readonly socket: WebSocket,
    private readonly outbound: { whenDrained(): Promise<void> },
    private readonly handle: FrameHandler,
    private readonly limits: InboundLimits,
    /** Told each time reading stops (for the metric). */
    private readonly onPaused: (why: 'queue') => void = () => {},
  ) {
    this.tokens = limits.burst;
  }

  /** The frames still queued, settled when the last one is done: what a drain waits for. */
  get settled(): Promise<void> {
    return this.tail;
  }

  push(data: RawData, isBinary: boolean): void {
    this.queued++;
    if (this.queued >= this.limits.maxQueued && this.reading) {
      this.reading = false;
      this.socket.pause();
      this.onPaused('queue');
    }
    this.tail = this.tail
      .then(async () => {
        if (this.closed) return;
        await this.takeToken();
        await this.outbound.whenDrained();
        if (this.closed) return;
        await this.handle(data, isBinary);
      })
      .finally(() => {
        this.queued--;
        if (!this.reading && !this.closed && this.queued <= this.limits.maxQueued / 2) {
          this.reading = true;
          this.socket.resume();
        }
      });
  }

  /** The socket closed: queued frames are dropped; `then` runs after the one being handled is done. */
  close(then: () => Promise<void>): Promise<void> {
    this.closed = true;
    this.tail = this.tail.then(then);
    return this.tail;
  }

  private async takeToken(): Promise<void> {
    this.refill();
    if (this.tokens < 1) {
      const waitMs = Math.ceil(((1 - this.tokens) * 1000) / this.limits.ratePerSec);
      await new Promise((resolve) => setTimeout(resolve, waitMs));
      this.refill();
    }
    this.tokens -= 1;
  }

  private refill(): void {
    const now = Date.now();
    this.tokens = Math.min(
      this.limits.burst,
      this.tokens + ((now - this.refilledAt) * this.limits.ratePerSec) / 1000,
    );
    this.refilledAt = now;
  }
}
