import { z } from 'zod';
import { rid } from '../protocol/frames.js';
import type { Router } from '../ws/router.js';
import type { MeshClocks } from './clock.js';

const setFrame = z.object({
  type: z.literal('clock.set'),
  speed: z.number().min(1, 'must be at least 1').max(100, 'must be at most 100'),
  rid,
});
const simpleFrame = (type: string) => z.object({ type: z.literal(type), rid });

/** The clock frames (PROTOCOL.md § Mesh clock); every one answers `clock.status`. */
export function registerClockFrames(router: Router, clocks: MeshClocks): void {
  const status = (value: object) => ({ type: 'clock.status', ...value });
  router.on('clock.set', setFrame, async (frame, { identity }) =>
    status(await clocks.set(identity.meshId, frame.speed)),
  );
  router.on('clock.pause', simpleFrame('clock.pause'), async (_f, { identity }) =>
    status(await clocks.pause(identity.meshId)),
  );
  router.on('clock.resume', simpleFrame('clock.resume'), async (_f, { identity }) =>
    status(await clocks.resume(identity.meshId)),
  );
  router.on('clock.get', simpleFrame('clock.get'), async (_f, { identity }) =>
    status(await clocks.get(identity.meshId)),
  );
}
