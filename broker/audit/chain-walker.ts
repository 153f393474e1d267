/**
 * One mesh's audit chain walked a row at a time, so a verifier can go on from where it stopped instead of
 * re-reading the whole chain (`verify.ts` is the all-at-once walk that answers `audit.verify`).
 *
 * The position is a level (a seq): the hashes of the valid rows at that level (more than one while the
 * chain is forked there), the hashes one level down (a fork that shows up late at the head level is
 * still link-checked) and the ids already seen at the head level (rows are re-read from that level on).
 * Rows must come in (seq, id) order. Unlike `verifyRows` it does not stop at the first broken row: it
 * counts every broken row and every extra row at a level (a fork), and goes on from the stored hash, so
 * one tampered row is one break and the rows after it still verify.
 */
import { auditHash, GENESIS } from './chain.js';
import type { AuditRow } from './verify.js';

export interface Finding {
  kind: 'break' | 'fork';
  meshId: string;
  seq: number;
  id: number;
  reason: string;
}

export interface WalkerState {
  seq: number;
  heads: string[];
  parents: string[];
  seenIds: number[];
  breaks: number;
  forks: number;
}

/**
 * `unlinked`: the row's hash holds but its prevHash is none of the rows the walker knows one level down.
 * Nothing is recorded yet: the caller reads every row at `row.seq - 1` and hands them to `linkLate`.
 */
export type StepResult = 'verified' | 'seen' | 'gap' | 'unlinked';

export class ChainWalker {
  seq: number;
  breaks: number;
  forks: number;
  private heads: Set<string>;
  private parents: Set<string>;
  private seenIds: Set<number>;

  constructor(
    readonly meshId: string,
    private readonly onFinding: (finding: Finding) => void = () => {},
    state: WalkerState = { seq: 0, heads: [GENESIS], parents: [], seenIds: [], breaks: 0, forks: 0 },
  ) {
    this.seq = state.seq;
    this.heads = new Set(state.heads);
    this.parents = new Set(state.parents);
    this.seenIds = new Set(state.seenIds);
    this.breaks = state.breaks;
    this.forks = state.forks;
  }

  /** The hash of the verified head row (the first one, when the head level is forked). */
  get headHash(): string {
    return [...this.heads][0] ?? GENESIS;
  }

  /**
   * Takes the next row. `gap` means the row is more than one level ahead: the rows between may not be
   * committed yet, so the caller stops here and comes back (or calls `skipGap` once it is sure).
   */
  step(row: AuditRow): StepResult {
    if (this.seenIds.has(row.id)) return 'seen';
    if (row.seq > this.seq + 1) return 'gap';
    const hashHolds = auditHash(row) === row.hash;
    if (row.seq < 1) {
      this.found('break', row, `seq ${row.seq} is not a chain position`);
      return 'verified';
    }
    if (row.seq < this.seq) {
      // Behind the head level: only reachable by a row committed long after its level was verified.
      this.found('fork', row, `row at seq ${row.seq} appeared after seq ${this.seq} was verified`);
      return 'verified';
    }
    if (row.seq === this.seq) {
      if (hashHolds && !this.parents.has(row.prevHash)) return 'unlinked';
      this.found('fork', row, `a second row at seq ${row.seq}`);
      if (!hashHolds) this.found('break', row, 'hash does not match the row');
      this.heads.add(row.hash);
      this.seenIds.add(row.id);
      return 'verified';
    }
    if (!hashHolds) this.found('break', row, 'hash does not match the row');
    else if (!this.heads.has(row.prevHash)) {
      if (row.seq > 1) return 'unlinked';
      this.found('break', row, 'first row does not link to genesis');
    }
    // Go on from the stored hash: the next row is checked against what the chain says, so only the
    // tampered row itself counts as broken.
    this.advance(row);
    return 'verified';
  }

  /**
   * Finishes an `unlinked` step, given every row now at `row.seq - 1`. With writers forking the chain (no
   * `ha.audit`), a fork row can commit after the walk has read its level; the next row linking to it is
   * then not a break. So: a row at that level with the hash `row` links to is a fork (counted and
   * reported like one the walk read in order, its own hash checked), and `row` verifies; only a prevHash
   * matching no row there is a break. The late row's own link is left to the rescan from genesis, which
   * reads every row in order (the walker keeps only one level below its head).
   */
  linkLate(row: AuditRow, rowsBelow: readonly AuditRow[]): void {
    const parentLevel = row.seq === this.seq ? this.parents : this.heads;
    const linked = rowsBelow.find((r) => r.seq === row.seq - 1 && r.hash === row.prevHash);
    // A row the walker verified at its head level, now with another hash, is that row rewritten in place
    // (same id), not a late fork: `row` linking to it is a break.
    const rewritten = linked !== undefined && row.seq === this.seq + 1 && this.seenIds.has(linked.id);
    const late = rewritten ? undefined : linked;
    if (late && !parentLevel.has(late.hash)) {
      this.found('fork', late, `row at seq ${late.seq} committed after seq ${late.seq} was verified`);
      if (auditHash(late) !== late.hash) this.found('break', late, 'hash does not match the row');
      parentLevel.add(late.hash);
    }
    if (!parentLevel.has(row.prevHash)) {
      const unlinked = rewritten
        ? `prevHash is the hash of row id ${linked.id} at seq ${linked.seq}, verified with another hash: rewritten`
        : `prevHash is not the hash of a row at seq ${row.seq - 1}`;
      if (row.seq === this.seq) {
        this.found('fork', row, `a second row at seq ${row.seq}`);
        this.found('break', row, unlinked);
        this.heads.add(row.hash);
        this.seenIds.add(row.id);
      } else {
        this.found('break', row, unlinked);
        // Go on from the stored hash, as `step` does after a broken row.
        this.advance(row);
      }
      return;
    }
    this.step(row);
  }

  /** The rows before `row` are missing for good (not just late): one break, then go on from it. */
  skipGap(row: AuditRow): void {
    this.found('break', row, `seq jumps from ${this.seq} to ${row.seq}`);
    if (auditHash(row) !== row.hash) this.found('break', row, 'hash does not match the row');
    this.advance(row);
  }

  state(): WalkerState {
    return {
      seq: this.seq,
      heads: [...this.heads],
      parents: [...this.parents],
      seenIds: [...this.seenIds],
      breaks: this.breaks,
      forks: this.forks,
    };
  }

  private advance(row: AuditRow): void {
    this.parents = this.heads;
    this.heads = new Set([row.hash]);
    this.seenIds = new Set([row.id]);
    this.seq = row.seq;
  }

  private found(kind: Finding['kind'], row: AuditRow, reason: string): void {
    if (kind === 'break') this.breaks++;
    else this.forks++;
    this.onFinding({ kind, meshId: this.meshId, seq: row.seq, id: row.id, reason });
  }
}
