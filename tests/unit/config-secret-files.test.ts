/**
 * Secrets from files (issue 25, item 2): every secret variable X may be given as X_FILE, a path whose
 * content (one trailing newline trimmed) is the value; both set, an unreadable, empty or oversized file is a
 * configuration error naming the variable and the path, never the content; a URL with a password is never
 * echoed by an error; REDIS_TLS_CA_FILE and a Redis Cluster's credentials are read and checked.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../broker/config.js';
import { MAX_SECRET_FILE_BYTES, SECRET_VARIABLES } from '../../broker/secrets/files.js';
import { redactUrl, scrub, secretValues } from '../../broker/secrets/redact.js';
import { MINIMAL_ENV } from '../helpers/config.js';

const dir = mkdtempSync(join(tmpdir(), 'wb-secret-files-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, content: string): string {
  const path = join(dir, name);
  writeFileSync(path, content, { mode: 0o600 });
  return path;
}

function configError(env: Record<string, string>): ConfigError {
  try {
    loadConfig({ ...MINIMAL_ENV, ...env });
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('no configuration error');
}

describe('X_FILE for every secret variable', () => {
  it('reads the value from the file, one trailing newline trimmed', () => {
    const { ADMIN_TOKEN: _token, ...rest } = MINIMAL_ENV;
    const config = loadConfig({
      ...rest,
      ADMIN_TOKEN_FILE: file('token', 'a-token-from-a-file-0123\n'),
      REDIS_URL_FILE: file('redis-url', 'rediss://broker:s3cret-pass@127.0.0.1:6380\r\n'),
      DATABASE_URL_FILE: file('db-url', 'postgres://broker:db-pass@127.0.0.1:5432/mesh'),
    });
    expect(config.adminToken).toBe('a-token-from-a-file-0123');
    expect(config.redisUrl).toBe('rediss://broker:s3cret-pass@127.0.0.1:6380');
    expect(config.databaseUrl).toBe('postgres://broker:db-pass@127.0.0.1:5432/mesh');
    // The read-pool default follows the database read from the file.
    expect(config.databaseReadUrl).toBe(config.databaseUrl);
  });

  it('covers the tokens, the bus secrets and every URL that may carry a password', () => {
    expect([...SECRET_VARIABLES]).toEqual(
      expect.arrayContaining([
        'ADMIN_TOKEN',
        'ADMIN_TOKEN_PREVIOUS',
        'BUS_SECRET',
        'BUS_SECRET_PREVIOUS',
        'DATABASE_URL',
        'DATABASE_READ_URL',
        'REDIS_URL',
        'REDIS_REMOTE_URLS',
        'REDIS_COUNTERS_URL',
        'REDIS_CLUSTER_PASSWORD',
        'UNLEASH_API_TOKEN',
      ]),
    );
  });

  it('both X and X_FILE set: an error naming both', () => {
    const error = configError({
      REDIS_URL: 'redis://127.0.0.1:6379',
      REDIS_URL_FILE: file('r', 'redis://x:6379'),
    });
    expect(error.variable).toBe('REDIS_URL_FILE');
    expect(error.message).toMatch(/REDIS_URL_FILE.*REDIS_URL.*both set/);
  });

  it('an unreadable, empty or oversized file: the variable and the path, never the content', () => {
    const missing = join(dir, 'nope');
    expect(configError({ DATABASE_URL_FILE: missing }).message).toBe(
      `DATABASE_URL_FILE: cannot read ${missing} (ENOENT)`,
    );
    expect(configError({ DATABASE_URL_FILE: dir }).message).toContain('is not a regular file');
    expect(configError({ DATABASE_URL_FILE: file('empty', '\n') }).message).toContain('is empty');
    const big = file('big', `secret-${'x'.repeat(MAX_SECRET_FILE_BYTES)}`);
    const error = configError({ DATABASE_URL_FILE: big });
    expect(error.message).toContain('is larger than');
    expect(error.message).not.toContain('secret-x');
  });

  it('a URL that is not one is refused without its password', () => {
    const error = configError({ REDIS_URL: 'redis://broker:hunter2-pass@127.0.0.1:notaport' });
    expect(error.variable).toBe('REDIS_URL');
    expect(error.message).not.toContain('hunter2-pass');
    const remote = configError({
      REGION: 'a',
      REDIS_REMOTE_URLS: 'redis://u:remote-pass@b:6379,redis://u:remote-pass@b:6379',
    });
    expect(remote.message).not.toContain('remote-pass');
    const nodes = configError({ REDIS_CLUSTER_NODES: 'broker:cluster-pass@10.0.0.1:7000' });
    expect(nodes.variable).toBe('REDIS_CLUSTER_NODES');
    expect(nodes.message).not.toContain('cluster-pass');
  });
});

describe('Redis TLS and cluster credentials', () => {
  it('REDIS_TLS_CA_FILE: read, and refused when it holds no certificate', () => {
    const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
    expect(loadConfig({ ...MINIMAL_ENV, REDIS_TLS_CA_FILE: file('ca.pem', pem) }).redisTlsCa).toBe(
      pem.trimEnd(),
    );
    expect(configError({ REDIS_TLS_CA_FILE: file('not-ca', 'hello') }).message).toContain(
      'no PEM certificate',
    );
    expect(configError({ REDIS_TLS_CA_FILE: join(dir, 'missing.pem') }).variable).toBe('REDIS_TLS_CA_FILE');
  });

  it('a cluster user needs a password; the password may come from a file', () => {
    expect(configError({ REDIS_CLUSTER_USERNAME: 'broker' }).variable).toBe('REDIS_CLUSTER_USERNAME');
    const config = loadConfig({
      ...MINIMAL_ENV,
      REDIS_CLUSTER_NODES: '127.0.0.1:7000',
      REDIS_CLUSTER_USERNAME: 'broker',
      REDIS_CLUSTER_PASSWORD_FILE: file('cluster-pw', 'cluster-pass\n'),
      REDIS_CLUSTER_TLS: 'true',
    });
    expect(config.redisClusterAuth).toEqual({ username: 'broker', password: 'cluster-pass', tls: true });
  });
});

describe('redaction', () => {
  it('hides a URL password, keeps the rest', () => {
    expect(redactUrl('rediss://broker:pw-1234@10.0.0.1:6380/0')).toBe(
      'rediss://broker:xxxxx@10.0.0.1:6380/0',
    );
    expect(redactUrl('redis://10.0.0.1:6379')).toBe('redis://10.0.0.1:6379');
    expect(redactUrl('not a url with user:pw@host')).toBe('[redacted]');
  });

  it('scrubs every secret value and URL password (raw and decoded) from a line', () => {
    const secrets = secretValues({
      ADMIN_TOKEN: 'admin-token-0123456789',
      REDIS_URL: 'redis://broker:p%40ss-word@h:6379',
      REDIS_REMOTE_URLS: 'redis://u:remote-one@a:6379,redis://u:remote-two@b:6379',
      LOG_LEVEL: 'debug',
    });
    const line = 'admin-token-0123456789 p%40ss-word p@ss-word remote-one remote-two debug';
    expect(scrub(line, secrets)).toBe('[redacted] [redacted] [redacted] [redacted] [redacted] debug');
  });
});
