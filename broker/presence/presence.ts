/**
 * Presence: which sessions of a mesh are online, the `peer.joined` / `peer.left` events, and the hello
 * nonces already used (replay protection is part of knowing who is who: one row, one flag).
 *
 * Contract:
 * - The first `activate(true)` runs at node start, before any hello: it forgets what an earlier run of
 *   this node left behind. A later `activate(false)` (a flip) takes over the sessions connected here.
 * - `attach` is called once a hello is accepted and its socket registered. A session that comes back
 *   within the grace period is reattached: no `peer.joined`, and no `peer.left` for the short absence. It
 *   reads the member's revocation again in its statement and writes nothing for a revoked member
 *   (`revoked`): a revocation that committed while the hello was in flight is seen here.
 * - `detach` is called when the session's socket closes. The session stays listed (disconnected) for the
 *   grace period; then it leaves and `peer.left` is emitted once.
 * - `leave` ends a session at once; `leaveMember` every session of a member, in its grace period too
 *   (member revoked: a revoked member is not listed as present, not even as disconnected).
 * - Events go to the `PresenceEvents` handler the node registered; it fans them out to sockets.
 * - `claimNonce` is true the first time a nonce is seen within the window in which its hello's timestamp
 *   is acceptable (twice the allowed skew), false for every later attempt (see presence/nonces.ts).
 * - `bindSession` binds a session id to the member of its first accepted hello, for far longer than the
 *   presence row lives (session-bindings.ts): another member's hello with the id is refused, whether the
 *   session is connected, in its grace period or long gone, on any node and across flips.
 * - `bindMember` is the hello's member lookup and `bindSession` in one round trip: it binds only for a
 *   member of the mesh that is not revoked, and writes nothing otherwise.
 * - `close` (node shutdown) clears only this node's sessions.
 */

import type { Peer } from '../../protocol/frames.js';
import type { SessionIdentity } from '../connections/connection.js';
import type { MemberBinding } from '../hello/admission.js';
import type { Lifecycle } from '../rows/lifecycle.js';

/** A session as `peers.list` lists it. */
export type PresenceEntry = Peer;

export type { PresenceEvents, PresenceFrame } from '../rows/context.js';

/**
 * What `attach` found. `revoked`: the member is revoked as of the attach's own statement (the admission's
 * re-check, read after the socket was registered, in the same round trip); nothing was written or emitted.
 */
export interface AttachOutcome {
  reattached: boolean;
  revoked?: boolean;
}
export interface Presence extends Lifecycle {
  claimNonce(nonce: string): Promise<boolean>;
  attach(session: SessionIdentity): Promise<AttachOutcome>;
  detach(session: SessionIdentity): Promise<void>;
  leave(session: SessionIdentity): Promise<void>;
  /** Ends every session of the member held here, connected or in its grace period (member revoked). */
  leaveMember(memberId: number): Promise<void>;
  /** Records a session's reported status and emits `peer.status`; false when the session is unknown. */
  setStatus(sessionId: string, status: string): Promise<boolean>;
  /** Binds `sessionId` to `memberId` (or confirms it); false when it belongs to another member. */
  bindSession(sessionId: string, memberId: number): Promise<boolean>;
  /** A hello's member lookup and `bindSession` in one round trip (nothing written for a non-member). */
  bindMember(meshId: string, pubkey: string, sessionId: string): Promise<MemberBinding>;
  list(meshId: string): Promise<PresenceEntry[]>;
}
