import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LocalScheduler } from '../../broker/schedules/scheduler.local.js';
import type { Schedule, ScheduleStore } from '../../broker/schedules/store.js';

afterEach(() => {
  vi.useRealTimers();
});

const DAY = 24 * 3600_000;

describe('local scheduler timers', () => {
  it('holds a delay longer than one timer can (24.8 days) by re-arming, and fires once at the right time', async () => {
    vi.useFakeTimers();
    const start = Date.now();
    const fired: number[] = [];
    const recorded: Array<[string, number, Date | null]> = [];
    const store = {
      active: async () => [],
      fired: async (id: string, n: number, next: Date | null) => {
        recorded.push([id, n, next]);
        return true;
      },
    };
    const scheduler = new LocalScheduler(
      store as unknown as ScheduleStore,
      async (_schedule, occurrence) => void fired.push(occurrence),
      pino({ level: 'silent' }),
    );
    const schedule: Schedule = {
      scheduleId: 's1',
      meshId: 'm',
      memberId: 1,
      sessionId: 's',
      creator: 'c',
      to: '*',
      body: 'b',
      at: new Date(start + 40 * DAY),
      cron: null,
      tz: null,
      nextFireAt: new Date(start + 40 * DAY),
      occurrences: 0,
      createdAt: new Date(start),
    };
    await scheduler.activate(); // a scheduler arms nothing until this node may run background work
    scheduler.created(schedule);
    await vi.advanceTimersByTimeAsync(25 * DAY);
    expect(fired).toEqual([]);
    await vi.advanceTimersByTimeAsync(15 * DAY - 1000);
    expect(fired).toEqual([]);
    await vi.advanceTimersByTimeAsync(2000);
    expect(fired).toEqual([1]);
    expect(recorded).toEqual([['s1', 1, null]]);
    await scheduler.close();
  });
});
