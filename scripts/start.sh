#!/usr/bin/env bash
# The README's first command (`npm start`): set up a fresh clone and run the main job, a local phase-3
# cluster (three brokers behind HAProxy) with a demo mesh. State lives in .workbench/. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/require-services.sh
bash scripts/require-packages.sh haproxy patroni etcd-server python3-etcd

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/meshbroker}"
# The cluster gets a Redis of its own (default user off, the brokers' ACL user, its password in
# .workbench/ only): a REDIS_URL of the caller's shell would name one instead (docs/design.md § Redis access).
unset REDIS_URL
node dist/cli/main.js up --phase "${PHASE:-3}" --port "${PORT:-8080}"
# From here on, whatever ends this script (Ctrl-C, a failure) stops the console and the cluster it started.
sleeper=""
console_pid=""
trap 'trap - EXIT; [ -n "$sleeper" ] && kill "$sleeper" 2>/dev/null; [ -n "$console_pid" ] && kill "$console_pid" 2>/dev/null && wait "$console_pid" 2>/dev/null; node dist/cli/main.js down; exit 0' INT TERM EXIT

# The console page (docs/console.md) in the background, logging to .workbench/logs/console.log (the
# owner's only, like the folder). Its URL carries its key, so the log never shows it: the console writes
# it to .workbench/console.url (0600) once it has polled the cluster, and it is printed below, to this
# terminal only (CONSOLE_PORT=0 picks a free port).
rm -f .workbench/console.url .workbench/logs/console.log # an older log may be 0644: made anew
(umask 077 && exec node dist/cli/main.js console --port "${CONSOLE_PORT:-8090}" > .workbench/logs/console.log 2>&1) &
console_pid=$!
console_url=""
for _ in $(seq 50); do
  console_url="$(cat .workbench/console.url 2>/dev/null || true)"
  [ -n "$console_url" ] || ! kill -0 "$console_pid" 2>/dev/null && break
  sleep 0.2
done

if [ ! -s .workbench/demo-mesh.json ]; then
  node dist/cli/main.js mesh create "demo-$(date +%s)" --members 2 --out .workbench/demo-mesh.json
fi

cat <<INFO
  demo mesh       .workbench/demo-mesh.json (meshId and two members' keys)
  flags           npx workbench flags list --env phase${PHASE:-3}
  console         ${console_url:-not running, see .workbench/logs/console.log} (nodes, flags, ownership, rates; /peer: a browser peer)

  Ctrl-C stops the cluster (the brokers drain, then the load balancer).
INFO

while true; do
  sleep 3600 &
  sleeper=$!
  wait "$sleeper"
done
