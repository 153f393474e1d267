/**
 * Revocation as a state (issue 30 item 5): each node re-reads, from Postgres, the revocations it may not
 * have heard of over the bus (a lost `member.revoked`, a bus down or reconnecting), every
 * `REVOCATION_RECHECK_MS` and at once after the bus reconnects, and ends the local sessions of every
 * revoked member it finds. A round is bounded: pages of PAGE rows of the partial index
 * `members_revoked_at_idx`, at most MAX_PAGES of them (what is left is the next round's).
 *
 * Where a round starts: `revoked_at` is the revoking transaction's now(), which can be a moment older
 * than its commit; each round therefore starts OVERLAP_MS before the previous round's Postgres now, so a
 * revocation committed late is still read (again, harmlessly: a member with no socket here costs nothing).
 * A node that could not read for a while (Postgres down) starts from its last good round, not from now.
 */
import type { Directory, RevocationCursor } from './directory.js';

const PAGE = 500;
const MAX_PAGES = 10;
export const OVERLAP_MS = 10_000;

export interface RevocationWatchOptions {
  directory: Pick<Directory, 'revokedAfter'>;
  /** Whether this node holds a socket of the member (cheap: the connection registry). */
  hasLocalSessions: (memberId: number) => boolean;
  /** Ends the member's sessions on this node (close 4403). */
  endMemberSessions: (memberId: number) => Promise<unknown>;
}

export class RevocationWatch {
  private from: RevocationCursor | undefined;

  constructor(private readonly options: RevocationWatchOptions) {}

  /** One round; returns how many sessions-holding members it ended here. */
  async round(): Promise<number> {
    const { directory, hasLocalSessions, endMemberSessions } = this.options;
    let cursor = this.from;
    let startedAt: Date | undefined;
    let ended = 0;
    for (let page = 0; page < MAX_PAGES; page++) {
      const { now, members } = await directory.revokedAfter(cursor, OVERLAP_MS, PAGE);
      startedAt ??= now;
      for (const member of members) {
        if (!hasLocalSessions(member.id)) continue;
        await endMemberSessions(member.id);
        ended++;
      }
      if (members.length < PAGE) {
        this.from = { revokedAt: new Date(startedAt.getTime() - OVERLAP_MS), id: 0 };
        return ended;
      }
      cursor = members[members.length - 1]!;
    }
    // More than MAX_PAGES pages of revocations: the next round goes on from here.
    this.from = cursor;
    return ended;
  }
}
