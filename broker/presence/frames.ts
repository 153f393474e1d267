import { peersListFrame } from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { Presence } from './presence.js';

/** `peers.list` → `peers`: the mesh's sessions as the node's presence implementation sees them. */
export function registerPresenceFrames(router: FrameRoutes, presence: Presence): void {
  router.on('peers.list', peersListFrame, async (_frame, { identity }) => ({
    type: 'peers',
    peers: await presence.list(identity.meshId),
  }));
}
