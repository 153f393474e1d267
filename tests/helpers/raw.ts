import WebSocket from 'ws';
import { within } from './wait.js';

export interface Frame {
  type: string;
  [field: string]: unknown;
}

/**
 * A bare WebSocket that speaks frames by hand, for protocol tests the SDK would never produce (bad
 * JSON, wrong fields, forged hellos). Frames received are queued; `next` waits for one that matches.
 */
export class RawSocket {
  private readonly frames: Frame[] = [];
  private readonly waiters: Array<() => void> = [];
  readonly closed: Promise<{ code: number; reason: string }>;

  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data) => {
      this.frames.push(JSON.parse(data.toString()) as Frame);
      for (const wake of this.waiters.splice(0)) wake();
    });
    this.closed = new Promise((resolve) => {
      socket.on('close', (code, reason) => {
        resolve({ code, reason: reason.toString() });
        for (const wake of this.waiters.splice(0)) wake();
      });
    });
  }

  /** `autoPong: false` makes a peer that never answers pings, like one whose network died. */
  static async open(url: string, options: { autoPong?: boolean } = {}): Promise<RawSocket> {
    const socket = new WebSocket(url, { autoPong: options.autoPong ?? true });
    socket.on('error', () => {});
    const raw = new RawSocket(socket);
    await new Promise<void>((resolve, reject) => {
      socket.once('open', () => resolve());
      socket.once('error', reject);
    });
    return raw;
  }

  send(frame: unknown): void {
    this.socket.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
  }

  /** The first queued frame matching `predicate` (removed from the queue), waiting up to `timeoutMs`. */
  async next(predicate: (frame: Frame) => boolean = () => true, timeoutMs = 5000): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const index = this.frames.findIndex(predicate);
      if (index >= 0) return this.frames.splice(index, 1)[0]!;
      const left = deadline - Date.now();
      if (left <= 0 || this.socket.readyState === WebSocket.CLOSED) {
        throw new Error(`no matching frame within ${timeoutMs} ms; queued: ${JSON.stringify(this.frames)}`);
      }
      // The next frame (or the socket's close), or the deadline: whichever comes first.
      await within(new Promise<void>((resolve) => this.waiters.push(resolve)), left, undefined);
    }
  }

  close(): void {
    this.socket.close();
  }
}
