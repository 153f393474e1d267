/**
 * The test files of `npm run test:slow` (vitest project `slow`, vitest.config.ts): each needs minutes on
 * this two-core machine, for a reason it cannot shed without checking less. CI (.ci/run) runs them after
 * `npm test`; every other file is in `npm test` (project `fast`). The README's § Tests says the same.
 * Figures: a full run on 2026-12-02 on two cores shared with other work (about twice an idle machine's).
 */
export const SLOW_TEST_FILES: string[] = [
  // The whole promotion, phase by phase, each with its smoke checks and a rollback: 845 s.
  'tests/cluster/promote.test.ts',
  // promote --analysis against a real Prometheus scraping a real phase-2 cluster: four promotions (healthy,
  // the regression rolled back, no data paused, a baseline pause resumed into a bake paused and aborted),
  // each with up to two smoke runs (node control off): 165-219 s.
  'tests/cluster/promote-analysis.test.ts',
  // The 18 smoke checks against a real cluster of every phase, the node-failure checks killing nodes: 438 s.
  'tests/cluster/smoke.test.ts',
  // `workbench chaos`: its own Postgres and redis-server, a seeded fault schedule under load (95 s run,
  // thirteen faults, 240 s limit); and two 45 s runs of the new kinds only (`--kinds`), about 80 s each.
  'tests/cluster/chaos.test.ts',
  // `workbench chaos --duration 30s --history` (its own Postgres, redis-server and cluster), then
  // `chaos check` on the history and on copies with a line removed or broken: 63 s; a 3 s
  // `workbench load --history` against two broker processes, checked: 10 s.
  'tests/process/chaos-check.test.ts',
  // `workbench soak --seeds 0 --soak 30s`: one real 30 s chaos run as the matrix's child (about 70 s).
  'tests/process/soak-matrix.test.ts',
  // `workbench chaos --plant`: two real 30 s chaos runs with one planted bug each: 147 s (62 s and 84 s).
  'tests/process/chaos-plants.test.ts',
  'tests/cluster/chaos-faults-partitions.test.ts',
  'tests/cluster/chaos-faults-processes.test.ts',
  // A real unleash-server (its start alone takes most of a minute) and a node's backoff: 119 s and 104 s.
  'tests/process/unleash-auth.test.ts',
  'tests/process/unleash.test.ts',
  // `workbench flags set KEY shadow` against a real unleash-server (its start is most of the minute).
  'tests/process/unleash-flags-shadow.test.ts',
  // The console's promotion and shadow panels in Chromium, over a real phase-1 cluster and a real
  // Prometheus, with a real `promote --analysis` paused and aborted: 36-51 s.
  'tests/cluster/console-promotion.test.ts',
  // `workbench fuzz` beside paced live traffic (the send quota sets the pace), memory sampled: 108 s.
  'tests/process/fuzz.test.ts',
  // docker-compose (Python, about a second of CPU a run) run 75 times over every phase's files: 104 s.
  'tests/unit/compose-files.test.ts',
  // `workbench up` on a throw-away six-process Redis Cluster, nodes started again: 94 s.
  'tests/cluster/local-redis-cluster.test.ts',
  // `workbench load` runs of many peers with their delivery checks: 81 s.
  'tests/cluster/load.test.ts',
  // `workbench up --phase 4`, two regions each with its own Postgres made by initdb, interrupted: 77 s.
  'tests/cluster/regions-interrupt.test.ts',
  // Patroni's failover in phase 4: two `workbench up --phase 4` (async, --sync), leaders killed and cut
  // from etcd under load, each failover waiting out the leader key's ttl.
  'tests/cluster/regions-patroni.test.ts',
];
