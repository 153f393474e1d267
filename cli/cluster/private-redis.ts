/**
 * The Redis of a local cluster that names none (`workbench up` without --redis-url or REDIS_URL): a
 * redis-server of its own on a free loopback port, with the default user off and one ACL user, the
 * brokers', limited to the cluster's key prefix (./redis-acl.ts; docs/design.md § Redis access). It is
 * detached (its own process group), since `up` exits while the cluster runs: its pid goes to
 * cluster.json, and `workbench down` stops it. Its configuration holds the password, so it is a file of
 * the owner's only under `.workbench/` (a private folder), never a command-line argument (`ps` shows those
 * to every account).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, closeSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { freePort } from '../ports.js';
import { brokerAclUser, newRedisPassword } from './redis-acl.js';
import { openPrivateLog } from './state-dir.js';

/** The ACL user the brokers (and the workbench's own commands, which only publish under the prefix) use. */
export const BROKER_REDIS_USER = 'broker';

export interface PrivateRedis {
  child: ChildProcess;
  /** The brokers' URL: user and password in it. */
  url: string;
  configFile: string;
}

/** redis.conf for the server: loopback only, nothing persisted, the default user off, the brokers' user. */
export function privateRedisConfig(port: number, password: string, prefix: string): string {
  return `${[
    `port ${port}`,
    'bind 127.0.0.1',
    'save ""',
    'appendonly no',
    'logfile ""',
    'user default off',
    brokerAclUser(BROKER_REDIS_USER, password, prefix),
  ].join('\n')}\n`;
}

/** Starts the server (`dir`: `.workbench/`); resolves once it accepts connections. */
export async function startPrivateRedis(dir: string, prefix: string): Promise<PrivateRedis> {
  const port = await freePort();
  const password = newRedisPassword();
  const configFile = join(dir, 'redis.conf');
  writeFileSync(configFile, privateRedisConfig(port, password, prefix), { mode: 0o600 });
  chmodSync(configFile, 0o600); // `mode` applies only to a file writeFileSync creates
  const log = openPrivateLog(dir, 'redis.log');
  const child = spawn('redis-server', [configFile], { detached: true, stdio: ['ignore', log, log] });
  // Not installed: an 'error' event, which unheard would end the process without saying why.
  let missing: Error | undefined;
  child.once('error', (error) => {
    missing = error;
  });
  child.unref();
  closeSync(log);
  const deadline = Date.now() + 10_000;
  while (!(await answers(port))) {
    if (missing)
      throw new Error(
        `redis-server could not be started (${missing.message}): apt-get install -y redis-server, or name a Redis with --redis-url`,
      );
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`redis-server on port ${port} did not start (see .workbench/logs/redis.log)`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return { child, url: `redis://${BROKER_REDIS_USER}:${password}@127.0.0.1:${port}`, configFile };
}

function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.end();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
