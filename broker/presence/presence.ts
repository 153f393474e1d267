/**
 * Presence: which sessions of a mesh are online, and the `peer.joined` / `peer.left` events.
 *
 * Contract:
 * - `start` runs once at node start, before any hello.
 * - `attach` is called once a hello is accepted. A session that comes back within the grace period is
 *   reattached: no `peer.joined`, and no `peer.left` for the short absence.
 * - `detach` is called when the session's socket closes. The session stays listed (disconnected) for the
 *   grace period; then it leaves and `peer.left` is emitted once.
 * - `leave` ends a session at once (member revoked).
 * - Events go to the `PresenceEvents` handler the node registered; it fans them out to sockets.
 * - `close` (node shutdown) clears only this node's sessions.
 */
import type { SessionIdentity } from '../connections/connection.js';

export interface PresenceEntry {
  pubkey: string;
  sessionId: string;
  name: string | null;
  groups: string[];
  node: string;
  connectedAt: string;
  status: string | null;
}

export type PresenceFrame =
  | { type: 'peer.joined'; pubkey: string; sessionId: string; name: string | null }
  | { type: 'peer.left'; pubkey: string; sessionId: string }
  | { type: 'peer.status'; pubkey: string; sessionId: string; status: string };

/** Where presence events go: the node sends them to the mesh's sessions (except the subject's own). */
export type PresenceEvents = (meshId: string, frame: PresenceFrame) => void;

export interface Presence {
  /** Node start: forget what an earlier run of this node left behind. */
  start(): Promise<void>;
  attach(session: SessionIdentity): Promise<{ reattached: boolean }>;
  detach(session: SessionIdentity): Promise<void>;
  leave(session: SessionIdentity): Promise<void>;
  /** Records a session's reported status and emits `peer.status`; false when the session is unknown. */
  setStatus(sessionId: string, status: string): Promise<boolean>;
  /** The member id that holds `sessionId`, if any node knows the session. */
  ownerOf(sessionId: string): Promise<number | undefined>;
  list(meshId: string): Promise<PresenceEntry[]>;
  close(): Promise<void>;
}
