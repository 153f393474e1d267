/**
 * Shadow comparator of `ha.presence` (docs/presence.md § Shadow): each `peers.list` the local presence
 * answered is asked of the shared one too (a read of the presence rows, which the local implementation
 * writes for visibility), restricted to this node's sessions, which is what both must agree on: the
 * local list is this node's only by design. Compared: the count and the set of session ids. A pair read
 * while a session was joining or leaving is read again once, 50 ms later, before it counts as a mismatch.
 */
import type { RowShadow, ShadowSample } from '../shadow/shadow.js';
import type { Presence, PresenceEntry } from './presence.js';

const SETTLE_MS = 50;

function summary(entries: readonly PresenceEntry[], nodeId: string) {
  const sessions = entries
    .filter((entry) => entry.node === nodeId)
    .map((entry) => entry.sessionId)
    .sort();
  return { count: sessions.length, sessions };
}

export function presenceShadow(sides: { local: Presence; shared: Presence }, nodeId: string): RowShadow {
  return {
    observes: ['list'],
    async start() {},
    async stop() {},
    async compare(_method, args, answer): Promise<ShadowSample> {
      const [meshId] = args as [string];
      const subject = `peers.list ${meshId}`;
      const local = summary(answer as PresenceEntry[], nodeId);
      const shared = summary(await sides.shared.list(meshId), nodeId);
      if (JSON.stringify(local) === JSON.stringify(shared)) return { subject, local, shared };
      await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
      const [again, againShared] = await Promise.all([sides.local.list(meshId), sides.shared.list(meshId)]);
      return { subject, local: summary(again, nodeId), shared: summary(againShared, nodeId) };
    },
  };
}
