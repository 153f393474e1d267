/**
 * A TLS failure can error twice on one socket (the failed verification, then the alert on the dying
 * socket), and ioredis listens with `once`: the second error crashed a node with a wrong
 * REDIS_TLS_CA_FILE (seen in tests/process/redis-cluster-access.test.ts under load). Every socket the
 * node's clients open keeps a listener (broker/redis/guarded-connector.ts).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:tls';
import type { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createMainClient } from '../../broker/redis/clients.js';
import { selfSignedCertificate } from '../helpers/tls.js';

const dir = mkdtempSync(join(tmpdir(), 'wb-guarded-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the Redis clients over TLS', () => {
  it('a second error on a socket whose certificate was refused is not a crash', async () => {
    const server = selfSignedCertificate(dir, 'server');
    const other = selfSignedCertificate(dir, 'other');
    const tls = createServer({ cert: readFileSync(server.certFile), key: readFileSync(server.keyFile) });
    tls.on('tlsClientError', () => {});
    await new Promise<void>((resolve) => tls.listen(0, '127.0.0.1', resolve));
    const { port } = tls.address() as AddressInfo;
    const client = createMainClient(
      { url: `rediss://127.0.0.1:${port}`, tlsCa: readFileSync(other.caFile, 'utf8') },
      { keyPrefix: 'p:' },
    ) as Redis;
    const errors: string[] = [];
    client.on('error', (error: Error) => errors.push(error.message));
    try {
      await expect(client.connect()).rejects.toThrow();
      expect(errors[0]).toMatch(/self-signed certificate/);
      const socket = (client as unknown as { stream: ReturnType<typeof connect> }).stream;
      // What the TLS alert does on the real socket: a second error after ioredis's one listener fired.
      expect(() => socket.emit('error', new Error('tlsv1 alert decode error'))).not.toThrow();
    } finally {
      client.disconnect();
      await new Promise((resolve) => tls.close(resolve));
    }
  });
});
