/**
 * The coalescer behind batched session starts (broker/db/coalesce.ts): calls of one tick share a run,
 * calls made while a run is in flight share the next, each caller gets its own result, a failed run fails
 * only its own callers, and during a burst a run starts at most every `burstMs`.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Coalescer } from '../../broker/db/coalesce.js';

/** A coalescer that doubles its inputs and records every batch it ran. */
function doubling(
  options: { maxBatch?: number; burstMs?: number; fail?: (batch: number[]) => boolean } = {},
) {
  const batches: number[][] = [];
  const coalescer = new Coalescer<number, number>({
    maxBatch: options.maxBatch ?? 100,
    burstMs: options.burstMs ?? 0,
    run: async (inputs) => {
      batches.push(inputs);
      if (options.fail?.(inputs)) throw new Error(`failed ${inputs.join(',')}`);
      return inputs.map((n) => n * 2);
    },
  });
  return { coalescer, batches };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('Coalescer', () => {
  it('answers the calls of one tick with one run, each its own result in order', async () => {
    const { coalescer, batches } = doubling();
    expect(await Promise.all([1, 2, 3].map((n) => coalescer.submit(n)))).toEqual([2, 4, 6]);
    expect(batches).toEqual([[1, 2, 3]]);
  });

  it('gathers the calls made while a run is in flight into the next run', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const batches: number[][] = [];
    const started: Array<() => void> = [];
    const coalescer = new Coalescer<number, number>({
      maxBatch: 100,
      burstMs: 0,
      run: async (inputs) => {
        batches.push(inputs);
        started.shift()?.();
        if (batches.length === 1) await gate;
        return inputs;
      },
    });
    const firstStarted = new Promise<void>((resolve) => started.push(resolve));
    const first = coalescer.submit(1);
    await firstStarted;
    const later = [coalescer.submit(2), coalescer.submit(3)];
    release();
    expect(await Promise.all([first, ...later])).toEqual([1, 2, 3]);
    expect(batches).toEqual([[1], [2, 3]]);
  });

  it('fails only the callers of the run that failed', async () => {
    const { coalescer, batches } = doubling({ maxBatch: 2, fail: (batch) => batch.includes(1) });
    const outcomes = await Promise.allSettled([1, 2, 3].map((n) => coalescer.submit(n)));
    expect(batches).toEqual([[1, 2], [3]]);
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected', 'fulfilled']);
    expect((outcomes[2] as PromiseFulfilledResult<number>).value).toBe(6);
  });

  it('during a burst starts a run at most every burstMs; a lone call after a quiet window waits a tick only', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'setImmediate', 'performance'] });
    const { coalescer, batches } = doubling({ burstMs: 50 });
    const first = coalescer.submit(1);
    await vi.advanceTimersByTimeAsync(0);
    expect(await first).toBe(2);
    // Right after: the window of the first run is still open, so this call waits for it to end.
    const second = coalescer.submit(2);
    const third = coalescer.submit(3);
    await vi.advanceTimersByTimeAsync(49);
    expect(batches).toEqual([[1]]);
    await vi.advanceTimersByTimeAsync(1);
    expect(await Promise.all([second, third])).toEqual([4, 6]);
    expect(batches).toEqual([[1], [2, 3]]);
    // Quiet for a window: the next call goes at the next tick.
    await vi.advanceTimersByTimeAsync(50);
    const lone = coalescer.submit(4);
    await vi.advanceTimersByTimeAsync(0);
    expect(await lone).toBe(8);
    expect(batches).toEqual([[1], [2, 3], [4]]);
  });
});
