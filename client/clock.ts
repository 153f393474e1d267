/**
 * `client.clock` (docs/protocol.md § Mesh clock): the mesh's simulated clock. Ticks come to every session
 * of the mesh without a subscription, so there is nothing to restore after a reconnect; `onTick` is a
 * typed listener with an unsubscribe, and the four requests return the clock's status.
 */
import type { ClockStatusFrame, ClockTick, Frame } from '../protocol/frames.js';
import type { Session } from './session.js';

type Options = { signal?: AbortSignal; timeoutMs?: number };

export class ClockApi {
  constructor(private readonly client: Session) {}

  /**
   * Calls `listener` with every `clock.tick` after the last one (a tick a moving session got twice is
   * dropped: the client's `clock.tick` event); returns the function that stops it.
   */
  onTick(listener: (tick: ClockTick) => void): () => void {
    return this.client.on('clock.tick', listener);
  }

  /** Creates the mesh's clock or changes its speed (1…100 simulated minutes per real minute). */
  set(speed: number, options: Options = {}): Promise<ClockStatusFrame> {
    return this.status({ type: 'clock.set', speed }, options);
  }

  get(options: Options = {}): Promise<ClockStatusFrame> {
    return this.status({ type: 'clock.get' }, options);
  }

  pause(options: Options = {}): Promise<ClockStatusFrame> {
    return this.status({ type: 'clock.pause' }, options);
  }

  resume(options: Options = {}): Promise<ClockStatusFrame> {
    return this.status({ type: 'clock.resume' }, options);
  }

  private status(frame: Frame, options: Options): Promise<ClockStatusFrame> {
    return this.client.request<ClockStatusFrame & Frame>(frame, options);
  }
}
