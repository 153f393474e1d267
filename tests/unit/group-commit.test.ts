/**
 * The one batcher of the broker (broker/delivery/group-commit.ts): the sends' and acks' group commit, and
 * the rows' session-start statements with its `burstMs` window. A request alone is written at once,
 * requests made while batches are in flight share the next, each caller gets its own outcome, a failed
 * batch fails only its own callers, and with `burstMs` a batch starts at most every `burstMs`. A batch whose
 * requests share a key (two hellos of one session) is written in rounds of distinct keys (`inDistinctRounds`).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { allOk, GroupCommit, inDistinctRounds, type Outcome } from '../../broker/delivery/group-commit.js';

/** A batcher that doubles its requests and records every batch it wrote; `gate` holds the first batch. */
function doubling(
  options: { maxBatch?: number; burstMs?: number; fail?: (batch: number[]) => boolean } = {},
) {
  const batches: number[][] = [];
  const commit = new GroupCommit<number, number>({
    maxBatch: options.maxBatch ?? 100,
    maxInFlight: 1,
    ...(options.burstMs === undefined ? {} : { burstMs: options.burstMs }),
    write: async (batch) => {
      batches.push(batch);
      if (options.fail?.(batch)) throw new Error(`failed ${batch.join(',')}`);
      return allOk(batch.map((n) => n * 2));
    },
  });
  return { commit, batches };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('GroupCommit', () => {
  it('writes a request alone at once, and the requests made while it is in flight in the next batch', async () => {
    const { commit, batches } = doubling();
    expect(await Promise.all([1, 2, 3].map((n) => commit.submit(n)))).toEqual([2, 4, 6]);
    expect(batches).toEqual([[1], [2, 3]]);
  });

  it('gives each request its own outcome: one refused request does not fail the others', async () => {
    const commit = new GroupCommit<number, number>({
      maxBatch: 100,
      maxInFlight: 1,
      write: async (batch) =>
        batch.map(
          (n): Outcome<number> => (n === 2 ? { ok: false, error: new Error('two') } : { ok: true, value: n }),
        ),
    });
    const outcomes = await Promise.allSettled([1, 2, 3].map((n) => commit.submit(n)));
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
  });

  it('fails only the callers of the batch that failed', async () => {
    const { commit, batches } = doubling({ maxBatch: 2, fail: (batch) => batch.includes(2) });
    const outcomes = await Promise.allSettled([1, 2, 3, 4].map((n) => commit.submit(n)));
    expect(batches).toEqual([[1], [2, 3], [4]]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'rejected', 'fulfilled']);
  });

  it('with burstMs starts a batch at most every burstMs; a request after a quiet window goes at once', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'performance'] });
    const { commit, batches } = doubling({ burstMs: 50 });
    expect(await commit.submit(1)).toBe(2);
    // Right after: the first batch's window is still open, so these wait for its end, together.
    const second = commit.submit(2);
    await vi.advanceTimersByTimeAsync(20);
    const third = commit.submit(3);
    await vi.advanceTimersByTimeAsync(29);
    expect(batches).toEqual([[1]]);
    await vi.advanceTimersByTimeAsync(1);
    expect(await Promise.all([second, third])).toEqual([4, 6]);
    expect(batches).toEqual([[1], [2, 3]]);
    // Quiet for a window: the next request is written at once.
    await vi.advanceTimersByTimeAsync(50);
    const lone = commit.submit(4);
    await vi.advanceTimersByTimeAsync(0);
    expect(await lone).toBe(8);
    expect(batches).toEqual([[1], [2, 3], [4]]);
  });
});

describe('inDistinctRounds', () => {
  it('writes distinct keys in one round, a repeated key in the next, in arrival order per key', async () => {
    const rounds: string[][] = [];
    const outcomes = await inDistinctRounds(
      ['a1', 'b1', 'a2', 'c1', 'a3', 'b2'],
      (request) => request[0]!,
      async (round) => {
        rounds.push(round);
        return round.map((request) => request.toUpperCase());
      },
    );
    expect(rounds).toEqual([['a1', 'b1', 'c1'], ['a2', 'b2'], ['a3']]);
    expect(outcomes).toEqual(allOk(['A1', 'B1', 'A2', 'C1', 'A3', 'B2']));
  });

  it('fails only the requests of a round that failed', async () => {
    const failure = new Error('round 2 failed');
    const outcomes = await inDistinctRounds(
      ['a1', 'b1', 'a2'],
      (request) => request[0]!,
      async (round) => {
        if (round.includes('a2')) throw failure;
        return round;
      },
    );
    expect(outcomes).toEqual([
      { ok: true, value: 'a1' },
      { ok: true, value: 'b1' },
      { ok: false, error: failure },
    ]);
  });
});
