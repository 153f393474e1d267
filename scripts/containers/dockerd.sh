#!/usr/bin/env bash
# A Docker daemon of this checkout, started by hand (no systemd): Debian's docker.io (dockerd 20.10) with its
# own data root, exec root, pid file and socket under .workbench/containers/ (gitignored, outside biome), and no other flags.
#
#   scripts/containers/dockerd.sh start    starts it unless it already runs; prints DOCKER_HOST=unix://…
#   scripts/containers/dockerd.sh stop     stops it (SIGTERM, its containers stop with it) and what it started
#   scripts/containers/dockerd.sh status   exits 0 when it answers
#   scripts/containers/dockerd.sh env      prints export DOCKER_HOST=… (eval "$(… env)")
#
# Clients: DOCKER_HOST=unix://<repo>/.workbench/containers/docker.sock /usr/bin/docker …  (call Debian's client by its
# path: the `docker` first on PATH here may be another, newer client). CONTAINERS_DIR moves the folder.
# One daemon per machine: a second dockerd would fight over the docker0 bridge and iptables chains.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${CONTAINERS_DIR:-$ROOT/.workbench/containers}
SOCK=$DIR/docker.sock
PIDFILE=$DIR/dockerd.pid
LOG=$DIR/dockerd.log
DOCKER=/usr/bin/docker
DOCKERD=/usr/sbin/dockerd

running_pid() {
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

answers() { DOCKER_HOST="unix://$SOCK" "$DOCKER" version >/dev/null 2>&1; }

require() {
  if [ ! -x "$DOCKERD" ] || [ ! -x "$DOCKER" ]; then
    echo "dockerd.sh: Debian's docker.io is missing: apt-get install -y docker.io docker-compose" >&2
    exit 1
  fi
}

start() {
  require
  mkdir -p "$DIR/data" "$DIR/exec"
  if running_pid >/dev/null && answers; then
    echo "DOCKER_HOST=unix://$SOCK"
    return 0
  fi
  if pid=$(running_pid); then
    echo "dockerd.sh: dockerd $pid runs but does not answer on $SOCK (see $LOG)" >&2
    exit 1
  fi
  rm -f "$PIDFILE" "$SOCK"
  # setsid: the daemon outlives the caller (a test runner, a shell) and gets none of its signals.
  setsid "$DOCKERD" --data-root "$DIR/data" --exec-root "$DIR/exec" --pidfile "$PIDFILE" \
    -H "unix://$SOCK" </dev/null >>"$LOG" 2>&1 &
  local spawned=$! waited=0
  until answers; do
    if ! kill -0 "$spawned" 2>/dev/null; then
      echo "dockerd.sh: dockerd exited at start; its log ($LOG):" >&2
      tail -20 "$LOG" >&2
      exit 1
    fi
    if [ "$waited" -ge 600 ]; then
      echo "dockerd.sh: dockerd did not answer on $SOCK within 60 s (see $LOG)" >&2
      kill -TERM "$spawned" 2>/dev/null || true
      exit 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  echo "DOCKER_HOST=unix://$SOCK"
}

# Processes whose command line names this folder (the daemon's containerd and its shims).
leftovers() {
  local pid
  for pid in $(pgrep -f -- "$DIR/" 2>/dev/null || true); do
    [ "$pid" != "$$" ] && grep -qa -- "$DIR/" "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
  done
  return 0
}

stop() {
  local pid
  if pid=$(running_pid); then
    kill -TERM "$pid"
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "dockerd.sh: dockerd $pid still runs after 30 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  local rest
  rest=$(leftovers)
  if [ -n "$rest" ]; then
    sleep 1
    rest=$(leftovers)
    # shellcheck disable=SC2086
    [ -n "$rest" ] && kill -TERM $rest 2>/dev/null || true
  fi
  rm -f "$PIDFILE" "$SOCK"
  echo "dockerd stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) running_pid >/dev/null && answers ;;
  env) echo "export DOCKER_HOST=unix://$SOCK" ;;
  *)
    echo "usage: scripts/containers/dockerd.sh start|stop|status|env" >&2
    exit 2
    ;;
esac
