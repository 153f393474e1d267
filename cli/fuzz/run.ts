/**
 * Runs a seeded fuzz against one node: bad frames over WebSocket connections of a real member (one frame at
 * a time, each awaited until the broker answers it), then bad HTTP requests. What counts as a finding: a
 * bad frame answered with anything but an `error` frame or a close, answered with an `internal` error, or
 * not answered within the wait; an HTTP answer that is not 4xx or does not come. The node's own health
 * (alive, memory, unhandled rejections) is for the caller to watch.
 */
import { randomUUID } from 'node:crypto';
import { signHello } from '@mesh-broker/sdk';
import { WebSocket } from 'ws';
import { type BadFrame, badFrames } from './frames.js';
import { type BadRequest, badRequests } from './http.js';
import { Random } from './random.js';

export interface FuzzOptions {
  /** The node's base URL (http://host:port). */
  url: string;
  meshId: string;
  member: { pubkey: string; secretKey: string };
  /** Another member of the mesh: the addressee of frames that need one. */
  peer: string;
  adminToken: string;
  seed: number;
  frames: number;
  requests: number;
  /** How long a bad frame or request may go unanswered. */
  answerWithinMs?: number;
}

export interface Finding {
  index: number;
  kind: string;
  problem: string;
}

export interface FuzzReport {
  seed: number;
  frames: { sent: number; errors: number; closes: number; byKind: Record<string, number> };
  requests: { sent: number; byStatus: Record<string, number> };
  findings: Finding[];
}

/** A socket of the member, welcomed (or fresh, for frames before the hello), with its incoming frames queued. */
class FuzzSocket {
  private readonly inbox: Array<Record<string, unknown>> = [];
  private waiter: (() => void) | undefined;
  closed: number | undefined;

  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data) => {
      try {
        this.inbox.push(JSON.parse(String(data)) as Record<string, unknown>);
      } catch {
        this.inbox.push({ type: '(not JSON)' });
      }
      this.waiter?.();
    });
    socket.on('close', (code) => {
      this.closed = code;
      this.waiter?.();
    });
    socket.on('error', () => {});
  }

  static async open(options: FuzzOptions, hello: boolean): Promise<FuzzSocket> {
    const socket = new WebSocket(`${options.url.replace(/^http/, 'ws')}/ws`);
    await new Promise<void>((resolve, reject) => {
      socket.once('open', () => resolve());
      socket.once('error', reject);
    });
    const fuzzSocket = new FuzzSocket(socket);
    if (hello) {
      const fields = await signHello(options.member, options.meshId, randomUUID());
      socket.send(JSON.stringify({ type: 'hello', v: 1, ...fields }));
      const welcome = await fuzzSocket.next(5000, () => true);
      if (welcome?.type !== 'welcome') {
        fuzzSocket.close();
        throw new Error(`no welcome: ${JSON.stringify(welcome)}`);
      }
    }
    return fuzzSocket;
  }

  /** The next frame for which `wanted` holds, or undefined on close or timeout; others are dropped. */
  async next(timeoutMs: number, wanted: (f: Record<string, unknown>) => boolean) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const frame = this.inbox.shift();
      if (frame) {
        if (wanted(frame)) return frame;
        continue;
      }
      if (this.closed !== undefined || Date.now() >= deadline) return undefined;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deadline - Date.now());
        this.waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.waiter = undefined;
    }
  }

  close(): void {
    this.socket.terminate();
  }
}

const FRAMES_PER_SOCKET = 80;

/** Events the broker may push at any time; they are no answer to a frame. */
const EVENTS = new Set([
  'peer.joined',
  'peer.left',
  'clock.tick',
  'message',
  'stream.data',
  'watch.triggered',
]);

async function sendFrame(options: FuzzOptions, frame: BadFrame, socket: FuzzSocket | undefined) {
  const target = frame.beforeHello ? await FuzzSocket.open(options, false) : socket!;
  target.socket.send(frame.data, { binary: frame.binary === true });
  const answer = await target.next(options.answerWithinMs ?? 5000, (f) => !EVENTS.has(String(f.type)));
  if (frame.beforeHello) target.close();
  return { answer, closed: target.closed };
}

export async function runFuzz(options: FuzzOptions): Promise<FuzzReport> {
  const random = new Random(options.seed);
  const report: FuzzReport = {
    seed: options.seed,
    frames: { sent: 0, errors: 0, closes: 0, byKind: {} },
    requests: { sent: 0, byStatus: {} },
    findings: [],
  };
  const frames = badFrames(random, options.frames, options.peer);
  let socket: FuzzSocket | undefined;
  let onSocket = 0;
  try {
    for (const [index, frame] of frames.entries()) {
      // A fresh socket every FRAMES_PER_SOCKET frames: below the broker's budget of bad frames per socket
      // (100 a minute, then 4400), so each frame's answer is its own and not the budget's close.
      if (
        !frame.beforeHello &&
        (socket === undefined || socket.closed !== undefined || onSocket >= FRAMES_PER_SOCKET)
      ) {
        socket?.close();
        socket = await FuzzSocket.open(options, true);
        onSocket = 0;
      }
      if (!frame.beforeHello) onSocket++;
      const { answer, closed } = await sendFrame(options, frame, socket);
      report.frames.sent++;
      report.frames.byKind[frame.kind.split(' ')[0]!] =
        (report.frames.byKind[frame.kind.split(' ')[0]!] ?? 0) + 1;
      const finding = (problem: string) => report.findings.push({ index, kind: frame.kind, problem });
      if (answer?.type === 'error') {
        report.frames.errors++;
        if (answer.code === 'internal') finding(`answered with an internal error: ${String(answer.message)}`);
        else if (frame.expect === 'close') finding(`expected a close, got error ${String(answer.code)}`);
      } else if (answer) {
        finding(`accepted: answered ${JSON.stringify(answer).slice(0, 200)}`);
      } else if (closed !== undefined) {
        report.frames.closes++;
        if (frame.expect === 'close' && closed !== 1009) finding(`closed with ${closed}, expected 1009`);
        if (frame.expect === 'error' && closed !== 4400)
          finding(`closed with ${closed} instead of an error frame`);
      } else {
        finding('no answer');
      }
    }
  } finally {
    socket?.close();
  }

  for (const [index, request] of badRequests(random, options.requests, options.adminToken).entries()) {
    report.requests.sent++;
    const status = await send(options.url, request, options.answerWithinMs ?? 5000);
    report.requests.byStatus[status] = (report.requests.byStatus[status] ?? 0) + 1;
    if (!/^4\d\d$/.test(status))
      report.findings.push({ index, kind: `HTTP ${request.kind}`, problem: `answered ${status}` });
  }
  return report;
}

async function send(url: string, request: BadRequest, timeoutMs: number): Promise<string> {
  try {
    const response = await fetch(`${url}${request.path}`, {
      method: request.method,
      headers: request.headers,
      body: request.body,
      signal: AbortSignal.timeout(timeoutMs),
    });
    await response.arrayBuffer();
    return String(response.status);
  } catch (error) {
    return (error as Error).name === 'TimeoutError' ? 'no answer' : `failed (${(error as Error).message})`;
  }
}
