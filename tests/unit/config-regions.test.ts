import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../broker/config.js';
import { configErrorFor, MINIMAL_ENV } from '../helpers/config.js';

/** The multi-region variables (docs/multi-region.md): unset is today's single region, bad ones are named. */

describe('multi-region configuration', () => {
  it('unset: one region, reads and counters on the primary database and the local Redis', () => {
    const config = loadConfig({
      ...MINIMAL_ENV,
      DATABASE_URL: 'postgres://db/x',
      REDIS_URL: 'redis://r:6379',
    });
    expect(config).toMatchObject({
      region: undefined,
      primaryRegion: undefined,
      databaseReadUrl: 'postgres://db/x',
      redisRemoteUrls: [],
      redisCountersUrl: 'redis://r:6379',
    });
  });

  it('reads every variable of a region of the simulation', () => {
    const config = loadConfig({
      ...MINIMAL_ENV,
      REGION: 'b',
      PRIMARY_REGION: 'a',
      DATABASE_URL: 'postgres://primary/x',
      DATABASE_READ_URL: 'postgresql://replica-b/x',
      REDIS_URL: 'redis://redis-b:6379',
      REDIS_REMOTE_URLS: 'redis://redis-a:6379, rediss://redis-c:6380',
      REDIS_COUNTERS_URL: 'redis://redis-a:6379',
    });
    expect(config).toMatchObject({
      region: 'b',
      primaryRegion: 'a',
      databaseReadUrl: 'postgresql://replica-b/x',
      redisRemoteUrls: ['redis://redis-a:6379', 'rediss://redis-c:6380'],
      redisCountersUrl: 'redis://redis-a:6379',
    });
  });

  it.each([
    [{ REGION: 'B' }, 'REGION', '1-32 characters of a-z, 0-9 or "-", got "B"'],
    [{ REGION: 'a'.repeat(33) }, 'REGION', '1-32 characters'],
    [{ REGION: 'eu west' }, 'REGION', 'got "eu west"'],
    [{ REGION: 'a', PRIMARY_REGION: 'a_b' }, 'PRIMARY_REGION', '1-32 characters'],
    [{ PRIMARY_REGION: 'a' }, 'PRIMARY_REGION', 'needs REGION'],
    [{ DATABASE_READ_URL: 'mysql://x/y' }, 'DATABASE_READ_URL', 'must use postgres: or postgresql:'],
    [{ DATABASE_READ_URL: 'replica:5432' }, 'DATABASE_READ_URL', 'must use postgres:'],
    [{ REDIS_COUNTERS_URL: 'http://x' }, 'REDIS_COUNTERS_URL', 'must use redis: or rediss:'],
    [{ REDIS_REMOTE_URLS: 'redis://a:1' }, 'REDIS_REMOTE_URLS', 'needs REGION'],
    [{ REGION: 'a', REDIS_REMOTE_URLS: 'redis://a:1,' }, 'REDIS_REMOTE_URLS', 'entry 2 is empty'],
    [{ REGION: 'a', REDIS_REMOTE_URLS: 'a:6379' }, 'REDIS_REMOTE_URLS', 'entry 1 must use redis:'],
    [{ REGION: 'a', REDIS_REMOTE_URLS: 'not a url' }, 'REDIS_REMOTE_URLS', 'entry 1 is not a URL'],
    [{ REGION: 'a', REDIS_REMOTE_URLS: 'redis://b:1,redis://b:1' }, 'REDIS_REMOTE_URLS', 'lists a URL twice'],
    [
      { REGION: 'a', REDIS_URL: 'redis://a:1', REDIS_REMOTE_URLS: 'redis://b:1,redis://a:1' },
      'REDIS_REMOTE_URLS',
      'lists REDIS_URL itself',
    ],
    [
      { REGION: 'a', REDIS_REMOTE_URLS: 'redis://b:1', REDIS_CLUSTER_NODES: '127.0.0.1:7000' },
      'REDIS_REMOTE_URLS',
      'cannot be combined with REDIS_CLUSTER_NODES',
    ],
    [
      { REDIS_COUNTERS_URL: 'redis://c:1', REDIS_CLUSTER_NODES: '127.0.0.1:7000' },
      'REDIS_COUNTERS_URL',
      'cannot be combined with REDIS_CLUSTER_NODES',
    ],
  ])('refuses %j, naming %s', (env, variable, message) => {
    const error = configErrorFor(env as Record<string, string>);
    expect(error.variable).toBe(variable);
    expect(error.message).toContain(`${variable}: `);
    expect(error.message).toContain(message);
  });
});
