import { describe, expect, it } from 'vitest';
import type { Logger } from '../../broker/log.js';
import type { Lifecycle } from '../../broker/rows/lifecycle.js';
import { Switch } from '../../broker/rows/switch.js';
import { waitFor } from '../helpers/wait.js';

const log = { warn: () => {}, error: () => {}, info: () => {} } as unknown as Logger;

/** A row implementation that records what happens to it; `work` runs until `done` settles (the test's say). */
class Recorder implements Lifecycle {
  readonly events: string[] = [];
  active = false;
  failActivate = false;
  calls = 0;

  constructor(readonly name: string) {}

  async activate(boot: boolean): Promise<void> {
    this.events.push(`activate${boot ? ':boot' : ''}`);
    if (this.failActivate) throw new Error(`${this.name} cannot start`);
    this.active = true;
  }

  async deactivate(): Promise<void> {
    this.events.push('deactivate');
    this.active = false;
  }

  async close(): Promise<void> {
    this.events.push('close');
  }

  /** A call that must only ever run on an active implementation. */
  async work(done: Promise<void> = Promise.resolve()): Promise<string> {
    if (!this.active) throw new Error(`${this.name} called while inactive`);
    this.calls++;
    await done; // a call that runs until the test ends it, so that moves happen under it
    if (!this.active) throw new Error(`${this.name} deactivated under a running call`);
    return this.name;
  }

  /** A notification that returns nothing (like audit.record). */
  note(): void {
    if (!this.active) throw new Error(`${this.name} notified while inactive`);
    this.calls++;
  }
}

/** A call's end, in the test's hands. */
function released(): { done: Promise<void>; release: () => void } {
  let release = () => {};
  const done = new Promise<void>((resolve) => {
    release = resolve;
  });
  return { done, release };
}

/** One turn of the event loop: every microtask queued so far has run. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function makeSwitch(drainMs = 5000) {
  const local = new Recorder('local');
  const shared = new Recorder('shared');
  const handOvers: string[] = [];
  const row = new Switch<Recorder>({
    flag: 'ha.audit',
    local,
    shared,
    handOver: async (from, to) => {
      handOvers.push(`${from.name}->${to.name}`);
    },
    log,
    drainMs,
  });
  return { local, shared, row, handOvers };
}

describe('a row switch', () => {
  it('activates the first implementation with boot, and only that first time', async () => {
    const { local, shared, row } = makeSwitch();
    await row.select('local');
    await row.select('shared');
    await row.select('local');
    expect(local.events).toEqual(['activate:boot', 'deactivate', 'activate']);
    expect(shared.events).toEqual(['activate', 'deactivate']);
  });

  it('waits for calls running on the old implementation before deactivating it', async () => {
    const { local, row } = makeSwitch();
    await row.select('local');
    const call = released();
    const running = row.view.work(call.done);
    let settled = false;
    const moved = row.select('shared').finally(() => {
      settled = true;
    });
    await nextTurn(); // the move has gone as far as it can: it waits for the call
    expect(settled).toBe(false);
    expect(local.active).toBe(true);
    call.release();
    await expect(running).resolves.toBe('local'); // not deactivated under it
    await moved;
    expect(local.events).toEqual(['activate:boot', 'deactivate']);
  });

  it('holds calls made during a move and sends them to the implementation in use after it', async () => {
    const { row } = makeSwitch();
    await row.select('local');
    const call = released();
    const blocker = row.view.work(call.done);
    const moved = row.select('shared');
    const during = row.view.work();
    row.view.note(); // a void call made meanwhile is not lost either
    await nextTurn();
    call.release();
    await expect(during).resolves.toBe('shared');
    await blocker;
    await moved;
    expect(row.using).toBe('shared');
  });

  it('undoes a failed hand-over: the old implementation in use and running again, the error reported', async () => {
    const { local, shared, row } = makeSwitch();
    await row.select('local');
    shared.failActivate = true;
    await expect(row.select('shared')).rejects.toThrow('shared cannot start');
    expect(row.using).toBe('local');
    expect(row.running).toBe(true);
    expect(local.active).toBe(true);
    await expect(row.view.work()).resolves.toBe('local');
    shared.failActivate = false;
    await row.select('shared');
    await expect(row.view.work()).resolves.toBe('shared');
  });

  it('undoes a failed state hand-over after the new implementation started', async () => {
    const local = new Recorder('local');
    const shared = new Recorder('shared');
    const row = new Switch<Recorder>({
      flag: 'ha.audit',
      local,
      shared,
      handOver: async () => {
        throw new Error('hand-over failed');
      },
      log,
    });
    await row.select('local');
    await expect(row.select('shared')).rejects.toThrow('hand-over failed');
    expect(shared.events).toEqual(['activate', 'deactivate']);
    expect(local.active).toBe(true);
    expect(row.using).toBe('local');
  });

  it('flips there and back fifty times under a steady stream of calls: every call served by an active side', async () => {
    const { local, shared, row, handOvers } = makeSwitch();
    await row.select('local');
    let calling = true;
    const results: string[] = [];
    const callers = Array.from({ length: 8 }, async () => {
      while (calling) {
        results.push(await row.view.work(nextTurn()));
        row.view.note();
      }
    });
    for (let flip = 0; flip < 50; flip++) {
      await row.select(flip % 2 === 0 ? 'shared' : 'local');
      // Calls run between moves.
      const answered = results.length;
      await waitFor(() => results.length > answered, { intervalMs: 1, what: 'a call between two moves' });
    }
    calling = false;
    await Promise.all(callers); // a call on an inactive side would have rejected here
    expect(handOvers).toHaveLength(50);
    expect(local.calls + shared.calls).toBeGreaterThan(100);
    expect(results).toContain('local');
    expect(results).toContain('shared');
  });

  it('gates a background row without changing sides: deactivated, then activated again', async () => {
    const { local, row } = makeSwitch();
    await row.select('local', false);
    expect(row.running).toBe(false);
    expect(local.events).toEqual([]);
    await row.select('local', true);
    await row.select('local', false);
    expect(local.events).toEqual(['activate:boot', 'deactivate']);
  });

  it('moves on after the drain bound when a call never ends', async () => {
    const { row } = makeSwitch(50);
    await row.select('local');
    void row.view.work(new Promise(() => {})).catch(() => {}); // a call that never ends
    const started = Date.now();
    await row.select('shared');
    expect(Date.now() - started).toBeLessThan(2000);
    expect(row.using).toBe('shared');
  });

  it('sends a call made after shutdown to the stopped implementation at once (it never waits forever)', async () => {
    const { row } = makeSwitch();
    await row.select('shared');
    await row.close();
    await expect(row.view.work()).rejects.toThrow('shared called while inactive');
  });

  it('closes the implementation in use at shutdown, after deactivating it', async () => {
    const { shared, row } = makeSwitch();
    await row.select('shared');
    await row.close();
    expect(shared.events).toEqual(['activate:boot', 'deactivate', 'close']);
  });
});
