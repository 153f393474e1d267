import type { ClockStatus, ClockStatusFrame } from '../../protocol/frames.js';
import { clockGetFrame, clockPauseFrame, clockResumeFrame, clockSetFrame } from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { MeshClocks } from './clock.js';

/** The clock frames (docs/protocol.md § Mesh clock); every one answers `clock.status`. */
export function registerClockFrames(router: FrameRoutes, clocks: MeshClocks): void {
  const status = (value: ClockStatus): ClockStatusFrame => ({ type: 'clock.status', ...value });
  router.on('clock.set', clockSetFrame, async (frame, { identity }) =>
    status(await clocks.set(identity.meshId, frame.speed)),
  );
  router.on('clock.pause', clockPauseFrame, async (_f, { identity }) =>
    status(await clocks.pause(identity.meshId)),
  );
  router.on('clock.resume', clockResumeFrame, async (_f, { identity }) =>
    status(await clocks.resume(identity.meshId)),
  );
  router.on('clock.get', clockGetFrame, async (_f, { identity }) =>
    status(await clocks.get(identity.meshId)),
  );
}
