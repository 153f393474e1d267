import { peersListFrame } from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import { fillByBytes } from '../paging.js';
import type { Presence } from './presence.js';

/**
 * `peers.list` → `peers`: the mesh's sessions as the node's presence implementation sees them, in session
 * id order, in pages of at most LIST_PAGE_MAX_BYTES (a mesh may be allowed many sessions); `next` is the
 * last session id of a page that was cut, the `cursor` of the next request.
 */
export function registerPresenceFrames(router: FrameRoutes, presence: Presence): void {
  router.on('peers.list', peersListFrame, async (frame, { identity }) => {
    const after = frame.cursor;
    const sorted = (await presence.list(identity.meshId))
      .filter((peer) => after === undefined || peer.sessionId > after)
      .sort((a, b) => (a.sessionId < b.sessionId ? -1 : a.sessionId > b.sessionId ? 1 : 0));
    const { entries, last } = fillByBytes(sorted);
    return last === undefined
      ? { type: 'peers', peers: entries }
      : { type: 'peers', peers: entries, next: last.sessionId };
  });
}
