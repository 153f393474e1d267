/**
 * What the feature modules (streams.ts, clock.ts, mcp.ts) need of a MeshClient, as an interface of its
 * public API: they are built on `request`/`write`/`on` like any app, and importing client.ts from them
 * would make a circle (client.ts constructs them).
 */
import type { ClockTick, Frame, Welcome } from '../protocol/frames.js';

export interface RequestOptions {
  timeoutMs?: number;
  retry?: boolean;
  signal?: AbortSignal;
}

export interface Session {
  /** Welcomed, with the socket open. */
  readonly connected: boolean;
  /** How many welcomes the client has had: what a feature compares to know what to send again. */
  readonly welcomes: number;
  request<T extends Frame = Frame>(frame: Frame, options?: RequestOptions): Promise<T>;
  write(frame: Frame): void;
  on(event: 'welcome', listener: (welcome: Welcome) => void): () => void;
  on(event: 'frame', listener: (frame: Frame) => void): () => void;
  on(event: 'clock.tick', listener: (tick: ClockTick) => void): () => void;
}
