import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { closePaced } from '../../broker/ws/paced-close.js';

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

/** Runs closePaced and returns how many items were closed after each 50 ms batch. */
async function closedPerBatch(count: number, perSecond: number, withinMs: number): Promise<number[]> {
  const closed: number[] = [];
  const done = closePaced(
    Array.from({ length: count }, (_, i) => i),
    (i) => closed.push(i),
    perSecond,
    withinMs,
  );
  let finished = false;
  void done.then(() => {
    finished = true;
  });
  const counts: number[] = [];
  await vi.advanceTimersByTimeAsync(0);
  counts.push(closed.length);
  while (!finished) {
    await vi.advanceTimersByTimeAsync(50);
    counts.push(closed.length);
  }
  expect(closed).toEqual(Array.from({ length: count }, (_, i) => i));
  return counts;
}

describe('closePaced (a drain at DRAIN_CLOSE_PER_SEC)', () => {
  it('closes at most the rate a second, one batch every 50 ms', async () => {
    // 500 a second = 25 a batch: 100 items take four batches.
    expect(await closedPerBatch(100, 500, 6000)).toEqual([25, 50, 75, 100]);
  });

  it('goes faster when the rate would not close everything within the bound', async () => {
    // 500 a second would take 2 s for 1,000; within 500 ms there are 10 batches: 100 a batch.
    expect(await closedPerBatch(1000, 500, 500)).toEqual([100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]);
  });

  it('closes everything at once with a rate of 0, a bound too short to pace, or fewer than one batch', async () => {
    expect(await closedPerBatch(100, 0, 6000)).toEqual([100]);
    expect(await closedPerBatch(100, 500, 0)).toEqual([100]);
    expect(await closedPerBatch(20, 500, 6000)).toEqual([20]);
  });
});
