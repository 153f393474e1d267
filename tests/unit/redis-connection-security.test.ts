/**
 * The options that prove a node to Redis and check Redis (issue 25, item 2), on the clients a node really
 * makes (broker/redis/clients.ts; nothing connects here): a single Redis's user and password from its URL and
 * TLS for `rediss:` with the CA; a Redis Cluster's user, password and TLS on every node's connection,
 * the sharded subscriber's included. The TLS and ACL paths against a real server are
 * tests/process/redis-access.test.ts, and on a real Redis Cluster with an ACL user (in the clear and over
 * TLS) tests/process/redis-cluster-access.test.ts.
 */
import { Cluster, type Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createMainClient, createOneShotClient, createSubscriberClient } from '../../broker/redis/clients.js';

const CA = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----';

describe('Redis connection security', () => {
  it('a single Redis: credentials from the URL, TLS with the CA for rediss: only', () => {
    const secure = createMainClient(
      { url: 'rediss://broker:pw-0123@127.0.0.1:6380', tlsCa: CA },
      { keyPrefix: 'p:' },
    ) as Redis;
    expect(secure.options.username).toBe('broker');
    expect(secure.options.password).toBe('pw-0123');
    expect(secure.options.tls).toEqual({ ca: CA, rejectUnauthorized: true });
    const subscriber = createSubscriberClient(secure) as Redis;
    expect(subscriber.options.tls).toEqual({ ca: CA, rejectUnauthorized: true });
    expect(subscriber.options.password).toBe('pw-0123');
    const plain = createOneShotClient({ url: 'redis://127.0.0.1:6379', tlsCa: CA }) as Redis;
    expect(plain.options.tls).toBeUndefined();
    for (const client of [secure, subscriber, plain]) client.disconnect();
  });

  it('a Redis Cluster: the user, password and TLS on every node, the sharded subscriber too', () => {
    const main = createMainClient(
      {
        url: 'redis://127.0.0.1:6379',
        clusterNodes: [{ host: '127.0.0.1', port: 7000 }],
        tlsCa: CA,
        clusterAuth: { username: 'broker', password: 'cluster-pw', tls: true },
      },
      { keyPrefix: 'p:' },
    ) as Cluster;
    expect(main).toBeInstanceOf(Cluster);
    const subscriber = createSubscriberClient(main) as Cluster;
    for (const client of [main, subscriber])
      expect(client.options.redisOptions).toMatchObject({
        username: 'broker',
        password: 'cluster-pw',
        tls: { ca: CA, rejectUnauthorized: true },
      });
    const noTls = createMainClient(
      {
        url: 'redis://127.0.0.1:6379',
        clusterNodes: [{ host: '127.0.0.1', port: 7000 }],
        clusterAuth: { password: 'only-a-password', tls: false },
      },
      { keyPrefix: 'p:' },
    ) as Cluster;
    expect(noTls.options.redisOptions?.tls).toBeUndefined();
    expect(noTls.options.redisOptions?.password).toBe('only-a-password');
    for (const client of [main, subscriber, noTls]) client.disconnect();
  });
});
