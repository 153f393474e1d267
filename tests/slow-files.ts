/**
 * The test files of `npm run test:slow` (vitest project `slow`, vitest.config.ts): each needs minutes on
 * this two-core machine, for a reason it cannot shed without checking less. CI (.ci/run) runs them after
 * `npm test`; every other file is in `npm test` (project `fast`). The README's § Tests says the same.
 */
export const SLOW_TEST_FILES: string[] = [
  // The whole promotion, phase by phase, each with its smoke checks and a rollback (400 s limit).
  'tests/cluster/promote.test.ts',
  // The 18 smoke checks against real clusters of every phase, the node-failure checks killing nodes.
  'tests/cluster/smoke.test.ts',
  // `workbench chaos`: its own Postgres and redis-server, a seeded fault schedule under load.
  'tests/cluster/chaos.test.ts',
];
