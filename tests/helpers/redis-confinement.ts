/**
 * What the brokers' Redis ACL user may do (cli/cluster/redis-acl.ts `brokerAclUser`), checked the same way on
 * every Redis the project runs it on (a single server, a Redis Cluster, `workbench up`'s own): keys under the
 * prefix work; keys and channels outside it, and the administrative commands, are refused with NOPERM.
 */
import type { Cluster, Redis } from 'ioredis';
import { expect } from 'vitest';

export async function expectConfinedToPrefix(broker: Redis | Cluster, prefix: string): Promise<void> {
  await broker.set(`${prefix}probe`, '1');
  expect(await broker.get(`${prefix}probe`)).toBe('1');
  await expect(broker.get('other:key')).rejects.toThrow(/NOPERM/);
  await expect(broker.set('other:key', 'mine')).rejects.toThrow(/NOPERM/);
  await expect(broker.publish('other:bus:mesh:x', 'forged')).rejects.toThrow(/NOPERM/);
  await expect(broker.spublish('other:bus:mesh:x', 'forged')).rejects.toThrow(/NOPERM/);
  await expect(broker.config('GET', 'requirepass')).rejects.toThrow(/NOPERM/);
  await expect(broker.flushall()).rejects.toThrow(/NOPERM/);
  await expect(broker.call('ACL', 'LIST')).rejects.toThrow(/NOPERM/);
  await expect(broker.keys('*')).rejects.toThrow(/NOPERM/);
  await broker.del(`${prefix}probe`);
}
