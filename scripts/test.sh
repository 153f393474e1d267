#!/usr/bin/env bash
# The README's second command (`npm test`): every check, from a fresh clone.
# Lint and format check, type check (sources and tests), then every test file (vitest) against the
# machine's real PostgreSQL and Redis. Ends with one line "tests: N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/require-services.sh
bash scripts/require-packages.sh haproxy prometheus chromium

echo "test: lint and format (biome)"
npx biome check .
echo "test: type check (tsc, including tests)"
npx tsc -p tsconfig.json --noEmit

mkdir -p test-results
status=0
npx vitest run --reporter=default --reporter=json --outputFile.json=test-results/vitest.json || status=$?

echo "test: benchmarks, one quick run each (they must keep working; figures are not judged here)"
node dist/bench/run.js --quick > test-results/bench-quick.jsonl || status=1

node -e "
  const r = require('./test-results/vitest.json');
  const skipped = r.numPendingTests + r.numTodoTests;
  console.log('tests: ' + r.numPassedTests + ' passed, ' + r.numFailedTests + ' failed, ' + skipped + ' skipped');
  if (r.numTotalTests === 0) { console.error('no test ran'); process.exit(1); }
" || status=1
exit "$status"
