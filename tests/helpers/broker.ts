import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { type BrokerNode, startBroker } from '../../broker/app.js';
import { loadConfig } from '../../broker/config.js';
import type { Logger } from '../../broker/log.js';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';

export interface TestNode extends BrokerNode {
  wsUrl: string;
  /** fetch against this node's admin API with the admin token. */
  admin(path: string, init?: { method?: string; body?: unknown; token?: string | null }): Promise<Response>;
}

/**
 * A broker node in this test process, on a free port, against the given database and a Redis prefix of
 * its own. Configured through the same environment variables as a real node.
 */
export async function startTestNode(
  databaseUrl: string,
  env: Record<string, string> = {},
  options: { log?: Logger } = {},
): Promise<TestNode> {
  const config = loadConfig({
    DATABASE_URL: databaseUrl,
    REDIS_URL: 'redis://127.0.0.1:6379',
    REDIS_KEY_PREFIX: `wbtest:${randomBytes(4).toString('hex')}:`,
    PORT: '0',
    NODE_ID: `test-${randomBytes(3).toString('hex')}`,
    ADMIN_TOKEN,
    ...env,
  });
  const log =
    options.log ?? pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent', base: { node: config.nodeId } });
  const node = await startBroker(config, { log });
  return {
    ...node,
    wsUrl: `${node.url.replace(/^http/, 'ws')}/ws`,
    admin: adminOf(node.url).admin,
  };
}

/** The admin API of a node at `url` (in this process or not), with the test admin token. */
export function adminOf(url: string): Pick<TestNode, 'admin'> {
  return {
    admin(path, init = {}) {
      const token = init.token === undefined ? ADMIN_TOKEN : init.token;
      const headers: Record<string, string> = {};
      if (token !== null) headers.authorization = `Bearer ${token}`;
      if (init.body !== undefined) headers['content-type'] = 'application/json';
      return fetch(`${url}${path}`, {
        method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
        headers,
        body: init.body === undefined ? undefined : JSON.stringify(init.body),
      });
    },
  };
}
