/**
 * Admission of a hello: every check between "a hello frame arrived" and "this is session S of member M",
 * in the order that keeps them cheap and safe:
 * - what costs nothing but CPU first (timestamp skew, signature), then one indexed read (the member);
 *   a hello from outside the mesh (unknown mesh or key, revoked, forged) is refused there, having written
 *   nothing: non-members cost a signature check and a lookup, never storage (issue 17, item 8);
 * - then the nonce, claimed only for a verified member, after the signature so a forged hello cannot burn
 *   a real peer's nonce;
 * - then the session id's binding to its member (written once, refreshed after), which no other member
 *   can take over, however long the session has been gone (issue 17, item 6).
 * The member lookup and the binding are one statement (one round trip: issue 26 item 5), which writes the
 * binding only for a member that is not revoked; its outcome is checked after the nonce, so the refusals
 * keep their order. What that costs: a replayed hello of a real member (refused for its nonce) has
 * refreshed that member's own binding of its own session id first, the same write its first hello made.
 */

import { CloseCode } from '../../protocol/errors.js';
import type { HelloFrame } from '../../protocol/requests.js';
import type { SessionIdentity } from '../connections/connection.js';
import type { Directory, Member } from '../identity/directory.js';
import { helloSignatureValid } from './signature.js';

export class HelloRejected extends Error {
  constructor(
    readonly closeCode: number,
    /** Metric label and close reason: short and stable. */
    readonly reason: string,
  ) {
    super(reason);
    this.name = 'HelloRejected';
  }
}

/**
 * What admission asks of the presence row, which is also the nonce guard (presence and replay protection
 * are one row; their contract is presence/presence.ts's `Presence`, which has these two). Declared here
 * because hello/ sits on the floor below the rows and imports none of them.
 */
export interface HelloGuards {
  /** True the first time the nonce is seen within the window its timestamp is acceptable in. */
  claimNonce(nonce: string): Promise<boolean>;
  /** Binds `sessionId` to `memberId` (or confirms it); false when it belongs to another member. */
  bindSession(sessionId: string, memberId: number): Promise<boolean>;
  /**
   * The member of `pubkey` in `meshId` and, for one not revoked, `bindSession` in the same round trip;
   * writes nothing for a non-member or a revoked member.
   */
  bindMember(meshId: string, pubkey: string, sessionId: string): Promise<MemberBinding>;
}

/** A hello's member (undefined: not in the mesh) and whether its session id is now bound to it. */
export interface MemberBinding {
  member: Member | undefined;
  /** False when the id belongs to another member, or when nothing was bound (no member, or revoked). */
  bound: boolean;
}

export interface AdmissionOptions {
  directory: Directory;
  presence: HelloGuards;
  skewMs: number;
}

export class HelloAdmission {
  constructor(private readonly options: AdmissionOptions) {}

  async admit(hello: HelloFrame): Promise<SessionIdentity> {
    const { directory, presence, skewMs } = this.options;
    const reject = (reason: string) => new HelloRejected(CloseCode.helloRejected, reason);
    if (Math.abs(Date.now() - hello.ts) > skewMs) throw reject('timestamp outside the allowed skew');
    if (!helloSignatureValid(hello)) throw reject('bad signature');
    const sessionId = hello.sessionId.toLowerCase();
    const { member, bound } = await presence.bindMember(hello.meshId, hello.pubkey, sessionId);
    if (!member) throw reject('unknown member');
    if (member.revokedAt) throw new HelloRejected(CloseCode.memberRevoked, 'member revoked');
    if (!(await presence.claimNonce(hello.nonce))) throw reject('nonce already used');
    if (!bound) {
      // The squatter's socket is refused; the owner's sessions are not touched.
      throw reject('session belongs to another member');
    }
    const groups = hello.groups ?? [];
    if (groups.join('\n') !== member.groups.join('\n')) await directory.setGroups(member.id, groups);
    return {
      // Keys of queues, locks, caches and the audit hash: one spelling of each id.
      meshId: hello.meshId.toLowerCase(),
      memberId: member.id,
      pubkey: hello.pubkey,
      sessionId,
      name: hello.name ?? member.name,
      groups,
    };
  }
}
