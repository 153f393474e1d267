#!/usr/bin/env bash
# The README's first command (`npm start`): set up a fresh clone and run the main job, a local phase-3
# cluster (three brokers behind HAProxy) with a demo mesh. State lives in .workbench/. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/require-services.sh
bash scripts/require-haproxy.sh

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/meshbroker}"
node dist/cli/main.js up --phase "${PHASE:-3}" --port "${PORT:-8080}"
# From here on, whatever ends this script (Ctrl-C, a failure) stops the cluster it started.
sleeper=""
trap 'trap - EXIT; [ -n "$sleeper" ] && kill "$sleeper" 2>/dev/null; node dist/cli/main.js down; exit 0' INT TERM EXIT

if [ ! -s .workbench/demo-mesh.json ]; then
  node dist/cli/main.js mesh create "demo-$(date +%s)" --members 2 --out .workbench/demo-mesh.json
fi

cat <<INFO
  demo mesh       .workbench/demo-mesh.json (meshId and two members' keys)
  flags           npx workbench flags list --env phase${PHASE:-3}

  Ctrl-C stops the cluster (the brokers drain, then the load balancer).
INFO

while true; do
  sleep 3600 &
  sleeper=$!
  wait "$sleeper"
done
