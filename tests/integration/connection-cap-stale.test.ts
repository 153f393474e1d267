/**
 * SharedConnectionCap against a real Redis: a session this node does not hold never stays in its part
 * (a refreshed part never expires, so such a session would take a place for good).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { LocalConnectionCap } from '../../broker/connection-cap/connection-cap.local.js';
import { SharedConnectionCap } from '../../broker/connection-cap/connection-cap.shared.js';
import type { Logger } from '../../broker/log.js';
import { createMainClient } from '../../broker/redis/clients.js';
import type { RedisGuard } from '../../broker/redis/guard.js';
import { waitFor } from '../helpers/wait.js';

const prefix = `test-cap-${randomUUID()}:`;
const redis = createMainClient({ url: 'redis://127.0.0.1:6379' }, { keyPrefix: prefix });
const quiet = { warn() {}, info() {}, debug() {}, error() {} } as unknown as Logger;
const guard = { usable: () => redis.status === 'ready', failed() {} } as unknown as RedisGuard;

function build(cap: number) {
  const fallback = new LocalConnectionCap(cap);
  const shared = new SharedConnectionCap({
    redis,
    guard,
    nodeId: 'a',
    cap,
    partTtlMs: 750,
    fallback,
    onFallback() {},
    log: quiet,
  });
  return { fallback, shared };
}

afterAll(async () => {
  const keys = await redis.keys(`${prefix}*`);
  for (const key of keys) await redis.del(key.slice(prefix.length));
  redis.disconnect();
});

describe('SharedConnectionCap stale part entries', () => {
  it('a release whose SREM failed is removed by the next refresh', async () => {
    await redis.connect();
    const mesh = randomUUID();
    const { shared } = build(3);
    await shared.activate();
    expect(await shared.admit(mesh, 's0')).toBe(true);
    expect(await shared.admit(mesh, 's1')).toBe(true);
    const srem = redis.srem.bind(redis);
    (redis as { srem: unknown }).srem = () => Promise.reject(new Error('Connection is closed.'));
    await shared.release(mesh, 's1');
    (redis as { srem: unknown }).srem = srem;
    await waitFor(async () => !(await redis.smembers(`cap:{${mesh}}:a`)).includes('s1'), {
      timeoutMs: 3000,
      what: 's1 gone from the part',
    });
    expect(await redis.smembers(`cap:{${mesh}}:a`)).toEqual(['s0']);
    await shared.deactivate();
  });

  it('an admission whose script timed out after running, refused locally, is taken out of the part', async () => {
    const mesh = randomUUID();
    const { shared, fallback } = build(2);
    await shared.activate();
    expect(await shared.admit(mesh, 's0')).toBe(true);
    await fallback.admit(mesh, 'local-only'); // admitted while Redis was unusable, not yet refreshed
    const evalFn = redis.eval.bind(redis);
    (redis as { eval: unknown }).eval = async (...args: Parameters<typeof evalFn>) => {
      await evalFn(...args);
      throw new Error('Command timed out');
    };
    expect(await shared.admit(mesh, 's2')).toBe(false);
    (redis as { eval: unknown }).eval = evalFn;
    await waitFor(async () => !(await redis.smembers(`cap:{${mesh}}:a`)).includes('s2'), {
      timeoutMs: 3000,
      what: 's2 gone from the part',
    });
    await shared.deactivate();
  });
});
