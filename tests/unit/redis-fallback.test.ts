import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { RedisClient } from '../../broker/redis/clients.js';
import { RedisWithFallback } from '../../broker/redis/fallback.js';
import { RedisGuard } from '../../broker/redis/guard.js';

describe('redis with fallback', () => {
  it('uses Redis while the guard allows, falls back (counted) on failure or while paused, and comes back', async () => {
    const client = { status: 'ready' } as RedisClient;
    const guard = new RedisGuard(client, 60_000);
    let fallbacks = 0;
    const lines: string[] = [];
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line).msg) });
    const helper = new RedisWithFallback({
      guard,
      onFallback: () => void fallbacks++,
      log,
      fallingBackMessage: 'falling back',
      recoveredMessage: 'back',
    });
    const redis = async () => 'redis';
    const local = async () => 'local';
    expect(await helper.run(redis, local)).toBe('redis');
    expect(fallbacks).toBe(0);
    // A failure that is not a timeout: answered locally, counted, and Redis is tried again next time.
    expect(await helper.run(async () => Promise.reject(new Error('connection reset')), local)).toBe('local');
    expect(fallbacks).toBe(1);
    expect(await helper.run(redis, local)).toBe('redis');
    // A timeout pauses Redis (the guard): the next calls go local without trying it.
    expect(await helper.run(async () => Promise.reject(new Error('Command timed out')), local)).toBe('local');
    let tried = false;
    const tracked = async () => {
      tried = true;
      return 'redis';
    };
    expect(await helper.run(tracked, local)).toBe('local');
    expect(tried).toBe(false);
    expect(fallbacks).toBe(3);
    // Disconnected: local too. Only the first fallback of a run is a warning.
    (client as { status: string }).status = 'reconnecting';
    expect(await helper.run(redis, local)).toBe('local');
    expect(lines.filter((line) => line === 'falling back')).toHaveLength(2);
    expect(lines.filter((line) => line === 'back')).toHaveLength(1);
  });
});
