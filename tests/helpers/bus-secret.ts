/**
 * The bus secret (BUS_SECRET, docs/design.md § The bus envelope) every node a test starts shares: one
 * constant, handed to in-process nodes by tests/helpers/nodes.ts and to every process a test spawns through
 * the test environment (vitest.config.ts `test.env`), as an operator's environment hands it to a node.
 * Imports nothing: vitest.config.ts reads it.
 */
export const TEST_BUS_SECRET = 'test-bus-secret-0123456789abcdef0123456789';
