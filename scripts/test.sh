#!/usr/bin/env bash
# The README's second command (`npm test`): the checks to run before every change, from a fresh clone,
# in under ten minutes on two cores. Lint and format check, type check (sources and tests), then every test
# file of vitest's `fast` project against the machine's real PostgreSQL and Redis. The files that need
# minutes (tests/slow-files.ts), the Node.js 24 pass and the benchmarks' quick runs are `npm run test:slow`
# (scripts/test-slow.sh), which CI runs after this (.ci/run). Ends with one line
# "tests: N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/require-services.sh
bash scripts/require-packages.sh haproxy prometheus chromium patroni etcd-server python3-etcd

echo "test: lint and format (biome)"
npx biome check .
echo "test: type check (tsc, including tests)"
npx tsc -p tsconfig.json --noEmit

mkdir -p test-results
rm -f test-results/vitest.json # a report is always this run's
status=0
npx vitest run --project fast --reporter=default --reporter=json --outputFile.json=test-results/vitest.json ||
  status=$?

node scripts/test-summary.cjs "Node $(node --version) fast=test-results/vitest.json" || status=1
exit "$status"
