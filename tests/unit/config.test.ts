import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../broker/config.js';

const base = { ADMIN_TOKEN: 'a-long-enough-admin-token' };

function errorFor(env: Record<string, string>): ConfigError {
  try {
    loadConfig({ ...base, ...env });
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('config was accepted');
}

describe('broker configuration', () => {
  it('has sensible defaults', () => {
    const config = loadConfig({ ...base, PORT: '9000' });
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
    const config = loadConfig({ ...base, ADMIN_TOKEN_PREVIOUS: 'the-retiring-admin-token' });
    expect(config.adminTokenPrevious).toBe('the-retiring-admin-token');
    expect(loadConfig({ ...base, ADMIN_TOKEN_PREVIOUS: '' }).adminTokenPrevious).toBeUndefined();
  });

  it.each([
    [{ ADMIN_TOKEN: '' }, 'ADMIN_TOKEN', 'is required'],
    [{ ADMIN_TOKEN: 'short' }, 'ADMIN_TOKEN', 'at least 16'],
    [{ ADMIN_TOKEN_PREVIOUS: 'short' }, 'ADMIN_TOKEN_PREVIOUS', 'at least 16'],
    [{ ADMIN_TOKEN_PREVIOUS: base.ADMIN_TOKEN }, 'ADMIN_TOKEN_PREVIOUS', 'the same as ADMIN_TOKEN'],
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
    const error = errorFor(env);
    expect(error.variable).toBe(variable);
    expect(error.message).toContain(variable);
    expect(error.message).toContain(text);
  });
});
