/** REDIS_CLUSTER_NODES: what the broker (and the CLI's flag push) accepts, and the errors for the rest. */
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../broker/config.js';
import { parseRedisClusterNodes } from '../../broker/redis/cluster-nodes.js';
import { MINIMAL_ENV } from '../helpers/config.js';

const BASE = MINIMAL_ENV;

describe('REDIS_CLUSTER_NODES', () => {
  it('unset: the single Redis of REDIS_URL, as before', () => {
    expect(loadConfig(BASE).redisClusterNodes).toBeUndefined();
  });

  it('lists host:port seed nodes (spaces around entries, IPv6 in brackets)', () => {
    expect(
      loadConfig({ ...BASE, REDIS_CLUSTER_NODES: '10.0.0.1:7000, redis-b:7001,[::1]:7002' })
        .redisClusterNodes,
    ).toEqual([
      { host: '10.0.0.1', port: 7000 },
      { host: 'redis-b', port: 7001 },
      { host: '::1', port: 7002 },
    ]);
  });

  it.each([
    ['', 'lists no node'],
    [' , ', 'lists no node'],
    ['127.0.0.1:7000,', 'entry 2 is empty'],
    ['127.0.0.1', '"127.0.0.1" is not host:port'],
    ['127.0.0.1:0', 'a port from 1 to 65535'],
    ['127.0.0.1:70000', 'a port from 1 to 65535'],
    [':7000', '":7000" is not host:port'],
    ['redis://a:7000', 'not a URL'],
  ])('refuses %j before anything starts, naming the variable: %s', (value, message) => {
    let error: unknown;
    try {
      loadConfig({ ...BASE, REDIS_CLUSTER_NODES: value });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).variable).toBe('REDIS_CLUSTER_NODES');
    expect((error as Error).message).toContain(message);
  });

  it('the CLI reads the same text the same way', () => {
    expect(parseRedisClusterNodes('a:1,b:2')).toEqual([
      { host: 'a', port: 1 },
      { host: 'b', port: 2 },
    ]);
  });
});
