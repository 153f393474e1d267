import { z } from 'zod';
import { rid } from '../protocol/frames.js';
import type { Router } from '../ws/router.js';
import type { Presence } from './presence.js';

const peersListFrame = z.object({ type: z.literal('peers.list'), rid });

/** `peers.list` → `peers`: the mesh's sessions as the node's presence implementation sees them. */
export function registerPresenceFrames(router: Router, presence: Presence): void {
  router.on('peers.list', peersListFrame, async (_frame, { identity }) => ({
    type: 'peers',
    peers: await presence.list(identity.meshId),
  }));
}
