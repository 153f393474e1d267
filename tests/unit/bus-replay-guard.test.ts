/** The bus's replay guard (broker/bus/replay-guard.ts): each envelope once per channel, bounded memory. */
import { describe, expect, it } from 'vitest';
import { ENVELOPE_MAX_AGE_MS } from '../../broker/bus/envelope.js';
import { ReplayGuard } from '../../broker/bus/replay-guard.js';

const stamp = (n: number, boot = 'aaaaaaaaaaaaaaaa') => ({ boot, n });

describe('ReplayGuard', () => {
  it('admits a sender process stamps in increasing order (gaps too) and refuses any stamp again', () => {
    const guard = new ReplayGuard();
    expect([1, 2, 5, 9].map((n) => guard.admit('c', 'node-a', stamp(n), 0))).toEqual([
      true,
      true,
      true,
      true,
    ]);
    expect([9, 5, 1, 8].map((n) => guard.admit('c', 'node-a', stamp(n), 0))).toEqual([
      false,
      false,
      false,
      false,
    ]);
    expect(guard.admit('c', 'node-a', stamp(10), 0)).toBe(true);
  });

  it('keeps channels, senders and boots (a restarted sender) apart', () => {
    const guard = new ReplayGuard();
    expect(guard.admit('c1', 'node-a', stamp(7), 0)).toBe(true);
    expect(guard.admit('c2', 'node-a', stamp(3), 0)).toBe(true);
    expect(guard.admit('c1', 'node-b', stamp(3), 0)).toBe(true);
    expect(guard.admit('c1', 'node-a', stamp(1, 'bbbbbbbbbbbbbbbb'), 0)).toBe(true);
    expect(guard.admit('c1', 'node-a', stamp(7), 0)).toBe(false);
  });

  it('forgets a triple only once every envelope it could replay is stale, and holds at most its bound', () => {
    const guard = new ReplayGuard(3);
    guard.admit('c', 'node-a', stamp(5), 0);
    // Within twice the age limit, still refused.
    expect(guard.admit('c', 'node-a', stamp(5), 2 * ENVELOPE_MAX_AGE_MS - 1)).toBe(false);
    for (const channel of ['d', 'e', 'f', 'g'])
      guard.admit(channel, 'node-a', stamp(1), 2 * ENVELOPE_MAX_AGE_MS);
    expect(guard.size).toBe(3);
    // The oldest went first: 'c' (then 'd') was forgotten, the newest three are remembered.
    expect(guard.admit('g', 'node-a', stamp(1), 2 * ENVELOPE_MAX_AGE_MS)).toBe(false);
    const later = 5 * ENVELOPE_MAX_AGE_MS;
    guard.admit('h', 'node-a', stamp(1), later);
    expect(guard.size).toBe(1);
  });
});
