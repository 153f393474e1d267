#!/bin/sh
# Node control for the compose stack, as environments/compose.json's `control` commands call it:
#   control.sh kill|stop|start NODE
# kill: SIGKILL the node's container; stop: SIGTERM and wait (the node drains); start: start it again and
# wait until Docker reports it healthy (at most 90 s). Finds the container by the labels every Compose
# version sets (project and service), so it works with `docker compose` and Debian's docker-compose 1.29.
# The project is COMPOSE_PROJECT_NAME (default mesh-broker); the engine is DOCKER_HOST's, as for docker;
# DOCKER names the client (default: `docker` on PATH).
set -eu
docker="${DOCKER:-docker}"
action="${1:-}"
node="${2:-}"
project="${COMPOSE_PROJECT_NAME:-mesh-broker}"
case "$action" in
  kill | stop | start) ;;
  *) echo "control.sh: usage: control.sh kill|stop|start NODE" >&2; exit 2 ;;
esac
if ! printf '%s\n' "$node" | grep -Eqx 'broker-[0-9]+'; then
  echo "control.sh: not a broker service: \"$node\"" >&2
  exit 2
fi
container="$("$docker" ps -aq --filter "label=com.docker.compose.project=$project" \
  --filter "label=com.docker.compose.service=$node" | head -n 1)"
if [ -z "$container" ]; then
  echo "control.sh: no container for $node in compose project $project" >&2
  exit 1
fi
case "$action" in
  kill) "$docker" kill --signal KILL "$container" >/dev/null ;;
  stop) "$docker" stop --time 15 "$container" >/dev/null ;;
  start)
    "$docker" start "$container" >/dev/null
    waited=0
    while [ "$("$docker" inspect --format '{{.State.Health.Status}}' "$container")" != healthy ]; do
      if [ "$waited" -ge 90 ]; then
        echo "control.sh: $node not healthy after 90 s" >&2
        exit 1
      fi
      sleep 1
      waited=$((waited + 1))
    done
    ;;
esac
