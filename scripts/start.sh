#!/usr/bin/env bash
# The README's first command (`npm start`): set up a fresh clone and run the main job.
# For now the main job is one broker node with a demo mesh; state lives in .workbench/.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/require-services.sh

mkdir -p .workbench
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/meshbroker}"
export PORT="${PORT:-8080}"
export NODE_ID="${NODE_ID:-node-1}"

node dist/cli/main.js migrate

if [ ! -s .workbench/admin-token ]; then
  node -e "process.stdout.write(require('crypto').randomBytes(24).toString('hex'))" > .workbench/admin-token
  chmod 600 .workbench/admin-token
fi
export ADMIN_TOKEN="${ADMIN_TOKEN:-$(cat .workbench/admin-token)}"

if [ ! -s .workbench/demo-mesh.json ]; then
  node dist/cli/main.js mesh create "demo-$(date +%s)" --members 2 --out .workbench/demo-mesh.json
fi

cat <<INFO

  mesh broker node "$NODE_ID"
    WebSocket     ws://127.0.0.1:$PORT/ws
    health        http://127.0.0.1:$PORT/health
    metrics       http://127.0.0.1:$PORT/metrics
    admin token   .workbench/admin-token   (Authorization: Bearer <token>)
    demo mesh     .workbench/demo-mesh.json (meshId and two members' keys)
    database      $DATABASE_URL

  Ctrl-C drains the node (peers get 1001) and stops it.

INFO

exec node dist/cli/main.js broker
