import type { Logger } from '../../broker/log.js';
import { type InProcessNode, startNode } from './nodes.js';

export { ADMIN_TOKEN, adminOf } from './nodes.js';

/** An in-process node of the one fixture (tests/helpers/nodes.ts). */
export type TestNode = InProcessNode;

/**
 * A broker node in this test process, on a free port, against the given database and a Redis prefix of
 * its own: `startNode({ kind: 'in-process' })` under its older name, for the callers not moved yet.
 */
export function startTestNode(
  databaseUrl: string,
  env: Record<string, string> = {},
  options: { log?: Logger } = {},
): Promise<TestNode> {
  return startNode({ kind: 'in-process', databaseUrl, env, log: options.log });
}
