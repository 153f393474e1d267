import { describe, expect, it } from 'vitest';
import { auditHash, GENESIS } from '../../broker/audit/chain.js';
import { ChainWalker, type Finding } from '../../broker/audit/chain-walker.js';
import type { AuditRow } from '../../broker/audit/verify.js';

const meshId = '11111111-1111-1111-1111-111111111111';
let nextId = 1;

function row(seq: number, prevHash: string, note = `e${seq}`): AuditRow {
  const fields = {
    meshId,
    seq,
    prevHash,
    eventType: 'test',
    actor: null,
    payload: { note },
    createdAt: new Date(1_700_000_000_000 + seq),
  };
  return { id: nextId++, ...fields, hash: auditHash(fields) };
}

function chainOf(length: number): AuditRow[] {
  const rows: AuditRow[] = [];
  for (let seq = 1; seq <= length; seq++) rows.push(row(seq, rows[seq - 2]?.hash ?? GENESIS));
  return rows;
}

describe('ChainWalker (the incremental audit walk)', () => {
  it('advances level by level and goes on from a saved state', () => {
    const rows = chainOf(5);
    const first = new ChainWalker(meshId);
    for (const r of rows.slice(0, 3)) expect(first.step(r)).toBe('verified');
    const resumed = new ChainWalker(meshId, undefined, first.state());
    expect(resumed.step(rows[2]!)).toBe('seen');
    for (const r of rows.slice(3)) expect(resumed.step(r)).toBe('verified');
    expect(resumed).toMatchObject({ seq: 5, breaks: 0, forks: 0, headHash: rows[4]!.hash });
  });

  it('counts each tampered row once and keeps verifying the rows after it', () => {
    const rows = chainOf(5);
    rows[1] = { ...rows[1]!, payload: { note: 'rewritten' } };
    const findings: Finding[] = [];
    const walker = new ChainWalker(meshId, (f) => findings.push(f));
    for (const r of rows) walker.step(r);
    expect(walker).toMatchObject({ seq: 5, breaks: 1, forks: 0 });
    expect(findings).toEqual([
      expect.objectContaining({ kind: 'break', seq: 2, reason: 'hash does not match the row' }),
    ]);
  });

  it('sees a fork that arrives late at the head level, and checks its link', () => {
    const rows = chainOf(3);
    const walker = new ChainWalker(meshId);
    for (const r of rows) walker.step(r);
    expect(walker.step(row(3, rows[1]!.hash, 'other branch'))).toBe('verified');
    expect(walker).toMatchObject({ seq: 3, forks: 1, breaks: 0 });
    // Linked to no row at seq 2 (the caller reads them all): a break.
    const unlinked = row(3, 'f'.repeat(64), 'unlinked');
    expect(walker.step(unlinked)).toBe('unlinked');
    walker.linkLate(unlinked, [rows[1]!]);
    expect(walker).toMatchObject({ forks: 2, breaks: 1 });
  });

  it('waits at a gap, and counts it as a break once told it is for good', () => {
    const rows = chainOf(4);
    const walker = new ChainWalker(meshId);
    walker.step(rows[0]!);
    expect(walker.step(rows[2]!)).toBe('gap');
    expect(walker.seq).toBe(1);
    walker.skipGap(rows[2]!);
    expect(walker.step(rows[3]!)).toBe('verified');
    expect(walker).toMatchObject({ seq: 4, breaks: 1 });
  });
});
