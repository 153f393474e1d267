import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../broker/config.js';
import { configErrorFor, MINIMAL_ENV } from '../helpers/config.js';

describe('broker configuration', () => {
  it('has sensible defaults', () => {
    const config = loadConfig({ ...MINIMAL_ENV, PORT: '9000' });
    expect(config).toMatchObject({
      port: 9000,
      host: '127.0.0.1',
      maxFrameBytes: 65536,
      helloSkewMs: 60_000,
      presenceGraceMs: 30_000,
      redisUrl: 'redis://127.0.0.1:6379',
    });
    expect(config.nodeId).toMatch(/-9000$/);
    expect(config.adminTokenPrevious).toBeUndefined();
  });

  it('accepts a retiring admin token during a rotation', () => {
    const config = loadConfig({ ...MINIMAL_ENV, ADMIN_TOKEN_PREVIOUS: 'the-retiring-admin-token' });
    expect(config.adminTokenPrevious).toBe('the-retiring-admin-token');
    expect(loadConfig({ ...MINIMAL_ENV, ADMIN_TOKEN_PREVIOUS: '' }).adminTokenPrevious).toBeUndefined();
  });

  it.each([
    [{ ADMIN_TOKEN: '' }, 'ADMIN_TOKEN', 'is required'],
    [{ ADMIN_TOKEN: 'short' }, 'ADMIN_TOKEN', 'at least 16'],
    [{ ADMIN_TOKEN_PREVIOUS: 'short' }, 'ADMIN_TOKEN_PREVIOUS', 'at least 16'],
    [{ ADMIN_TOKEN_PREVIOUS: MINIMAL_ENV.ADMIN_TOKEN }, 'ADMIN_TOKEN_PREVIOUS', 'the same as ADMIN_TOKEN'],
    [{ PORT: 'eighty' }, 'PORT', 'whole number'],
    [{ PORT: '70000' }, 'PORT', 'between 0 and 65535'],
    [{ DATABASE_URL: 'not a url' }, 'DATABASE_URL', 'is not a URL'],
    [{ DATABASE_URL: 'mysql://x/y' }, 'DATABASE_URL', 'postgres:'],
    [{ REDIS_URL: 'http://localhost' }, 'REDIS_URL', 'redis:'],
    [{ NODE_ID: 'has spaces' }, 'NODE_ID', 'letters, digits'],
    [{ MAX_FRAME_BYTES: '-1' }, 'MAX_FRAME_BYTES', 'whole number'],
    [{ PRESENCE_GRACE_MS: '1.5' }, 'PRESENCE_GRACE_MS', 'whole number'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL', 'one of'],
  ])('refuses %o naming %s', (env, variable, text) => {
    const error = configErrorFor(env);
    expect(error.variable).toBe(variable);
    expect(error.message).toContain(variable);
    expect(error.message).toContain(text);
  });
});
