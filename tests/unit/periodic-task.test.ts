import { afterEach, describe, expect, it, vi } from 'vitest';
import { PeriodicTask } from '../../broker/timing/periodic.js';

afterEach(() => {
  vi.useRealTimers();
});

function recorder() {
  const warnings: Array<[object, string]> = [];
  return {
    warnings,
    log: { warn: (fields: object, message: string) => void warnings.push([fields, message]) },
  };
}

describe('periodic task', () => {
  it('runs a round every period once started, none before nor after stop', async () => {
    vi.useFakeTimers();
    const { log } = recorder();
    let rounds = 0;
    const task = new PeriodicTask({ everyMs: 100, run: () => void rounds++, onError: { log, message: 'x' } });
    await vi.advanceTimersByTimeAsync(500);
    expect(rounds).toBe(0);
    task.start();
    task.start(); // a second start arms nothing more
    expect(task.running).toBe(true);
    await vi.advanceTimersByTimeAsync(99);
    expect(rounds).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(rounds).toBe(1);
    await vi.advanceTimersByTimeAsync(300);
    expect(rounds).toBe(4);
    await task.stop();
    expect(task.running).toBe(false);
    await vi.advanceTimersByTimeAsync(1000);
    expect(rounds).toBe(4);
  });

  it('runs the first round at once with firstInMs 0, and again after a restart', async () => {
    vi.useFakeTimers();
    const { log } = recorder();
    let rounds = 0;
    const task = new PeriodicTask({
      everyMs: 100,
      firstInMs: 0,
      run: () => void rounds++,
      onError: { log, message: 'x' },
    });
    task.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(rounds).toBe(1);
    await task.stop();
    task.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(rounds).toBe(2);
    await task.stop();
  });

  it('never overlaps rounds (rate): a round due while one runs is skipped; stop waits for the round in flight', async () => {
    vi.useFakeTimers();
    const { log } = recorder();
    let started = 0;
    let finish: () => void = () => {};
    const task = new PeriodicTask({
      everyMs: 100,
      run: () => {
        started++;
        return new Promise<void>((resolve) => {
          finish = resolve;
        });
      },
      onError: { log, message: 'x' },
    });
    task.start();
    await vi.advanceTimersByTimeAsync(350);
    expect(started).toBe(1);
    expect(task.runNow()).toBe(task.runNow()); // "now" joins the round in flight
    let stopped = false;
    const stopping = task.stop().then(() => {
      stopped = true;
    });
    await vi.advanceTimersByTimeAsync(0);
    expect(stopped).toBe(false);
    finish();
    await stopping;
    expect(started).toBe(1);
  });

  it('after-run cadence: the next round is due a period after the previous one ended', async () => {
    vi.useFakeTimers();
    const { log } = recorder();
    const startedAt: number[] = [];
    const task = new PeriodicTask({
      everyMs: 100,
      cadence: 'after-run',
      firstInMs: 0,
      run: async () => {
        startedAt.push(Date.now());
        await new Promise((resolve) => setTimeout(resolve, 50)); // a round of 50 ms
      },
      onError: { log, message: 'x' },
    });
    const t0 = Date.now();
    task.start();
    await vi.advanceTimersByTimeAsync(400);
    expect(startedAt.map((at) => at - t0)).toEqual([0, 150, 300]);
    await task.stop();
  });

  it('logs and counts a failing round, and goes on', async () => {
    vi.useFakeTimers();
    const { log, warnings } = recorder();
    let counted = 0;
    let rounds = 0;
    const task = new PeriodicTask({
      everyMs: 100,
      run: async () => {
        rounds++;
        throw new Error('boom');
      },
      onError: { log, message: 'round failed', fields: { meshId: 'm' }, count: () => void counted++ },
    });
    task.start();
    await vi.advanceTimersByTimeAsync(300);
    expect(rounds).toBe(3);
    expect(counted).toBe(3);
    expect(warnings[0]?.[1]).toBe('round failed');
    expect(warnings[0]?.[0]).toMatchObject({ meshId: 'm', err: { message: 'boom' } });
    await expect(task.runNow()).resolves.toBeUndefined(); // the caller of "now" never sees the error
    await task.stop();
  });

  it('nextRound resolves when the next round ends, timer or trigger', async () => {
    vi.useFakeTimers();
    const { log } = recorder();
    let rounds = 0;
    const task = new PeriodicTask({
      everyMs: 1000,
      run: () => void rounds++,
      onError: { log, message: 'x' },
    });
    task.start();
    const next = task.nextRound();
    await vi.advanceTimersByTimeAsync(1000);
    await next;
    expect(rounds).toBe(1);
    const triggered = task.nextRound();
    void task.runNow();
    await triggered;
    expect(rounds).toBe(2);
    await task.stop();
  });

  it('jitter spreads each delay within ± the fraction of the period', async () => {
    vi.useFakeTimers();
    const { log } = recorder();
    const at: number[] = [];
    const draws = [0, 0.999, 0.5];
    const task = new PeriodicTask({
      everyMs: 1000,
      jitter: 0.2,
      random: () => draws.shift() ?? 0.5,
      run: () => void at.push(Date.now()),
      onError: { log, message: 'x' },
    });
    const t0 = Date.now();
    task.start();
    await vi.advanceTimersByTimeAsync(3000);
    // 800 (−20 %), then +1200 (≈ +20 %), then +1000
    expect(at.map((t) => t - t0)).toEqual([800, 2000, 3000]);
    await task.stop();
    expect(
      () => new PeriodicTask({ everyMs: 1, jitter: 2, run: () => {}, onError: { log, message: 'x' } }),
    ).toThrow();
  });
});
