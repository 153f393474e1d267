#!/usr/bin/env bash
# `npm run test:slow`: what `npm test` leaves out to stay under ten minutes, and CI runs after it
# (.ci/run), so every test still runs in CI:
#   1. vitest's `slow` project: the files of tests/slow-files.ts (each needs minutes; the list says why);
#   2. the Node.js 24 pass (below);
#   3. one quick run of each benchmark (they must keep working; figures are not judged here).
# Ends with one line "tests: N passed, N failed, N skipped" over its two vitest passes.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/require-services.sh
bash scripts/require-packages.sh haproxy prometheus chromium patroni etcd-server python3-etcd faketime

mkdir -p test-results
rm -f test-results/vitest-slow.json test-results/vitest-node-lts.json # a report is always this run's
status=0
echo "test: the slow test files (vitest project slow, tests/slow-files.ts)"
npx vitest run --project slow --reporter=default --reporter=json --outputFile.json=test-results/vitest-slow.json ||
  status=$?

# Node.js 24, the reference runtime (README § Node.js versions), next to the machine's Node.js 20 above.
# Not the whole suite a second time: on two shared cores that is another 10 to 25 minutes and doubles the
# exposure of the timing-sensitive cluster tests, for code paths the Node 20 pass already ran. This pass
# covers what depends on the runtime: the unit tests (pure logic, about a minute) and the process tests,
# which start the compiled `workbench` and real broker processes on Node 24 (start-up, drain as PID 1, the
# crash policy, the CLI, the SDK failing over between brokers). The whole suite on Node 24 is
# `npm run test:node-lts`. The binary comes from the npm registry (fetched once into .node-lts/); a fetch
# that fails fails this run, it is never skipped.
echo "test: Node.js 24 pass (unit and process tests, scripts/node-lts.sh)"
bash scripts/node-lts.sh vitest tests/unit tests/process \
  --reporter=default --reporter=json --outputFile.json=test-results/vitest-node-lts.json || status=$?

echo "test: benchmarks, one quick run each (they must keep working; figures are not judged here)"
node dist/bench/run.js --quick > test-results/bench-quick.jsonl || status=1

node scripts/test-summary.cjs "Node $(node --version) slow=test-results/vitest-slow.json" \
  "Node 24=test-results/vitest-node-lts.json" || status=1
exit "$status"
