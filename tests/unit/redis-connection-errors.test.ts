/**
 * How a node reports a lasting Redis error (broker/redis/connection-errors.ts), on the clients a node really
 * makes (nothing connects here): a refused password or certificate is a warn line naming what to check, once
 * per cause. On a Redis Cluster the cause arrives as a node error (the cluster's own error only says that no
 * node is available), on the main connections and on the sharded subscribers'; where ioredis dropped the
 * cause ("Connection is closed." after a refused certificate), one probe of the node finds it (here against a
 * real TLS server whose certificate the client does not trust). The process test with a real cluster is
 * tests/process/redis-cluster-access.test.ts.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createServer } from 'node:tls';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createMainClient, createSubscriberClient } from '../../broker/redis/clients.js';
import { logRedisErrors } from '../../broker/redis/connection-errors.js';
import { selfSignedCertificate } from '../helpers/tls.js';
import { waitFor } from '../helpers/wait.js';

/** A logger at debug level whose lines the test reads. */
function capturingLogger() {
  const lines: Array<{ level: number; msg: string; redisNode?: string }> = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  return { log: pino({ level: 'debug' }, stream), lines };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));
const WARN = 40;
const DEBUG = 20;

function clusterClient() {
  return createMainClient(
    {
      url: 'redis://127.0.0.1:6379',
      clusterNodes: [{ host: '127.0.0.1', port: 7000 }],
      clusterAuth: { username: 'broker', password: 'wrong', tls: false },
    },
    { keyPrefix: 'p:' },
  );
}

describe('Redis connection errors', () => {
  it("a cluster's node refusing the password: one warn line naming the cause and the node", async () => {
    const { log, lines } = capturingLogger();
    const client = clusterClient();
    logRedisErrors(client, log, 'redis');
    const refused = new Error('WRONGPASS invalid username-password pair or user is disabled.');
    client.emit('node error', refused, '127.0.0.1:7000');
    client.emit('node error', refused, '127.0.0.1:7001');
    client.emit('error', new Error('None of startup nodes is available'));
    await flush();
    const warns = lines.filter((line) => line.level === WARN);
    expect(warns).toHaveLength(1);
    expect(warns[0]).toMatchObject({
      msg: expect.stringMatching(/refused the credentials/),
      redisNode: '127.0.0.1:7000',
    });
    expect(lines.filter((line) => line.level === DEBUG)).toHaveLength(2);
    client.disconnect();
  });

  it("a cluster's sharded subscriber refusing the certificate: a warn line", async () => {
    const { log, lines } = capturingLogger();
    const main = clusterClient();
    const subscriber = createSubscriberClient(main);
    logRedisErrors(subscriber, log, 'redis (subscriber)');
    const untrusted = Object.assign(new Error('self-signed certificate'), {
      code: 'DEPTH_ZERO_SELF_SIGNED_CERT',
    });
    subscriber.emit('nodeError', untrusted, '127.0.0.1:7000');
    await flush();
    expect(lines.filter((line) => line.level === WARN).map((line) => line.msg)).toEqual([
      expect.stringMatching(/^redis \(subscriber\): the Redis server certificate is not trusted/),
    ]);
    main.disconnect();
    subscriber.disconnect();
  });

  it('a node error naming no cause: one probe of that node finds the untrusted certificate', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wb-redis-probe-'));
    const server = selfSignedCertificate(dir, 'server');
    const other = selfSignedCertificate(dir, 'other');
    const tlsServer = createServer({
      cert: readFileSync(server.certFile),
      key: readFileSync(server.keyFile),
    });
    tlsServer.on('tlsClientError', () => {});
    await new Promise<void>((resolve) => tlsServer.listen(0, '127.0.0.1', resolve));
    const { port } = tlsServer.address() as AddressInfo;
    const { log, lines } = capturingLogger();
    const client = createMainClient(
      {
        url: 'redis://127.0.0.1:6379',
        clusterNodes: [{ host: '127.0.0.1', port }],
        tlsCa: readFileSync(other.caFile, 'utf8'),
        clusterAuth: { username: 'broker', password: 'pw', tls: true },
      },
      { keyPrefix: 'p:' },
    );
    try {
      logRedisErrors(client, log, 'redis');
      client.emit('node error', new Error('Connection is closed.'), `127.0.0.1:${port}`);
      const warn = await waitFor(() => lines.find((line) => line.level === WARN), {
        timeoutMs: 5000,
        what: 'a warn line from the probe',
      });
      expect(warn).toMatchObject({
        msg: expect.stringMatching(/certificate is not trusted/),
        redisNode: `127.0.0.1:${port}`,
      });
    } finally {
      client.disconnect();
      tlsServer.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
