#!/usr/bin/env bash
# Shared set-up of both README commands: npm dependencies (when missing or stale) and the build.
# Idempotent and quiet when there is nothing to do.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null; then
  echo "setup: Node.js 24 (or 20.19+, README § Node.js versions) is needed: node not found on PATH" >&2
  exit 1
fi

# node_modules/.package-lock.json is npm's record of what is installed: reinstall when the lock is newer.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm dependencies (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
fi

echo "setup: building (tsc)"
npm run --silent build
