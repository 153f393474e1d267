import type { InProcessNode } from './nodes.js';

export { ADMIN_TOKEN, adminOf } from './nodes.js';

/** An in-process node of the one fixture (tests/helpers/nodes.ts `startNode({ kind: 'in-process' })`). */
export type TestNode = InProcessNode;
