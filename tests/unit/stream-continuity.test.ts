/**
 * The node's gap filling (broker/streams/continuity.ts) over a real MemoryHistory, where the timing of a
 * two-node test cannot be steered: a gap found by the position check that the history has wholly given up
 * by the time it is read is reported once, as one `stream.gap`, and delivery goes on after it.
 */
import { describe, expect, it } from 'vitest';
import { Continuity, type Registry } from '../../broker/streams/continuity.js';
import { MemoryHistory } from '../../broker/streams/history.memory.js';
import type { StreamData, StreamGap } from '../../protocol/frames.js';

const MESH = 'mesh-1';
const frame = (n: number) => ({
  type: 'stream.data' as const,
  stream: 's',
  data: n,
  from: 'a'.repeat(64),
  fromSession: '00000000-0000-0000-0000-000000000001',
});

function registry(): Registry & { out: Array<StreamData | StreamGap> } {
  const out: Array<StreamData | StreamGap> = [];
  return {
    out,
    deliverHere: (_mesh, f) => out.push(f),
    hasSubscribers: () => true,
    notify: (_mesh, _stream, f) => {
      out.push(f);
    },
    hold: () => {},
    release: () => {},
  };
}

describe('stream continuity on one node', () => {
  it('a gap the history gave up wholly before it was read is reported once, then delivery goes on', async () => {
    const history = new MemoryHistory({ size: 3, ttlMs: 60_000, bytes: 1 << 20 }, 1 << 30);
    const here = registry();
    const gaps: string[] = [];
    const continuity = new Continuity(history, here, (outcome) => gaps.push(outcome));
    // Offset 1 arrives; 2..4 are published elsewhere and lost on the bus.
    continuity.accept(MESH, await history.append(MESH, frame(1)));
    for (const n of [2, 3, 4]) await history.append(MESH, frame(n));
    await continuity.check(); // notes the top, 4
    // Before the next round 5..10 push 2..4 out of the three-publish history.
    for (let n = 5; n <= 10; n++) await history.append(MESH, frame(n));
    await continuity.check(); // fills through 4: nothing of it is held any more
    await new Promise((resolve) => setImmediate(resolve));
    const summary = here.out.map((f) => (f.type === 'stream.gap' ? `gap ${f.from}-${f.to}` : f.offset));
    expect(summary).toEqual([1, 'gap 2-4']);
    expect(gaps).toEqual(['reported']);
    // The next round fills the rest (8..10 held, 5..7 gone) after it.
    await continuity.check();
    await continuity.check();
    await new Promise((resolve) => setImmediate(resolve));
    expect(here.out.map((f) => (f.type === 'stream.gap' ? `gap ${f.from}-${f.to}` : f.offset))).toEqual([
      1,
      'gap 2-4',
      'gap 5-7',
      8,
      9,
      10,
    ]);
  });
});
