/**
 * The row set (broker/rows/row-set.ts): a row's `build` gets exactly the services it `uses` and the API of
 * the rows it `needs`; a row listed before one it needs fails the start, naming both; frames and
 * revocations go to every row's contribution.
 */
import { describe, expect, it } from 'vitest';
import type { NodeServices } from '../../broker/rows/context.js';
import type { Lifecycle } from '../../broker/rows/lifecycle.js';
import { defineRow, type RowParts } from '../../broker/rows/row.js';
import { RowSet } from '../../broker/rows/row-set.js';
import { Router } from '../../broker/ws/router.js';
import { pingFrame } from '../../protocol/requests.js';

class Counter implements Lifecycle {
  value = 0;
  async activate() {}
  async deactivate() {}
  async close() {}
}

const services = {
  config: { nodeId: 'n1' },
  pool: { name: 'pool' },
  log: { warn() {}, info() {}, debug() {}, error() {} },
  bus: { relay: () => () => {} },
} as unknown as NodeServices;

const seen: Record<string, unknown>[] = [];
const revoked: number[] = [];

const counterRow = defineRow({
  name: 'counter',
  flag: 'ha.audit',
  metric: 'm1',
  doc: 'doc',
  uses: ['config'],
  build: (deps): RowParts<Counter, { label: string }> => {
    seen.push({ ...deps });
    return { local: new Counter(), shared: new Counter(), exports: { label: 'counted' } };
  },
});

const userRow = defineRow({
  name: 'user',
  flag: 'ha.clock',
  metric: 'm2',
  doc: 'doc',
  uses: ['pool'],
  needs: { counter: counterRow },
  build: (deps): RowParts<Counter> => {
    seen.push({ ...deps });
    return {
      local: new Counter(),
      shared: new Counter(),
      frames: (routes) => routes.on('ping', pingFrame, async () => ({ type: 'pong', ts: 1 })),
      memberRevoked: async (member) => {
        revoked.push(member.id);
      },
    };
  },
});

describe('the row set', () => {
  it('builds each row from what it declared, and nothing else', async () => {
    seen.length = 0;
    const set = new RowSet([counterRow, userRow], services);
    expect(Object.keys(seen[0]!)).toEqual(['config']);
    expect(Object.keys(seen[1]!).sort()).toEqual(['counter', 'pool']);
    const counter = seen[1]!.counter as { view: Counter; label: string };
    expect(counter.label).toBe('counted');
    expect(counter.view).toBe(set.get(counterRow).view);

    const router = new Router();
    set.serveFrames(router);
    expect(router.has('ping')).toBe(true);
    await set.memberRevoked({ id: 7 } as never);
    expect(revoked).toEqual([7]);
  });

  it('refuses a row listed before a row it needs, naming both', () => {
    expect(() => new RowSet([userRow, counterRow], services)).toThrow(
      'row user needs counter, which is not listed before it',
    );
  });
});
