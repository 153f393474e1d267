import { describe, expect, it } from 'vitest';
import { badFrames } from '../../cli/fuzz/frames.js';
import { badRequests } from '../../cli/fuzz/http.js';
import { Random } from '../../cli/fuzz/random.js';

const peer = 'ab'.repeat(32);

describe('fuzz generators', () => {
  it('the same seed gives the very same frames and requests; another seed does not', () => {
    const frames = (seed: number) => badFrames(new Random(seed), 300, peer);
    const requests = (seed: number) => badRequests(new Random(seed), 100, 'token');
    expect(frames(7)).toEqual(frames(7));
    expect(requests(7)).toEqual(requests(7));
    expect(frames(8)).not.toEqual(frames(7));
  });

  it('covers every kind of bad frame within a few thousand', () => {
    const kinds = new Set(badFrames(new Random(1), 3000, peer).map((f) => f.kind.split(' ')[0]));
    for (const kind of [
      'random',
      'truncated',
      'JSON',
      'unknown',
      'NUL',
      'frame',
      'a',
      'binary',
      'oversized',
      'send',
      'schedule.create',
      'watch.create',
      'mcp.call',
    ])
      expect(kinds, kind).toContain(kind);
  });

  it('frames of wrong type never carry the right type by accident', () => {
    for (const frame of badFrames(new Random(3), 2000, peer)) {
      if (!frame.kind.includes('wrongly typed')) continue;
      const parsed = JSON.parse(String(frame.data));
      const field = frame.kind.split('wrongly typed ')[1]!;
      const original = { id: 'string', to: 'string', body: 'string', stream: 'string', speed: 'number' }[
        field
      ];
      if (original) expect(typeof parsed[field] === original && !Array.isArray(parsed[field])).toBe(false);
    }
  });
});
