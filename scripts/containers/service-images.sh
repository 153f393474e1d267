#!/usr/bin/env bash
# Makes, locally, the images of the compose stack's other services (deploy/compose/compose.yml) for machines
# that reach no container registry (this sandbox), under the names the compose file uses, so the compose files
# stay as an operator runs them. THESE ARE STAND-INS, NOT THE OFFICIAL IMAGES: each is Debian bookworm (the
# debootstrap root filesystem that scripts/containers/base-image.sh caches) with Debian's package installed and a
# small entrypoint that does what the compose file expects of the official image:
#
#   postgres:15                       Debian's postgresql-15. POSTGRES_PASSWORD (required) / POSTGRES_USER /
#                                     POSTGRES_DB, PGDATA=/var/lib/postgresql/data; on an empty data directory:
#                                     initdb, password auth (scram-sha-256) for TCP, then the files of
#                                     /docker-entrypoint-initdb.d (*.sh run or sourced, *.sql via psql) against
#                                     a temporary server on the Unix socket only; then postgres on 0.0.0.0:5432
#                                     as PID 1, as user postgres.
#   redis:7                           Debian's redis-server 7.0, as user redis in /data; protected mode off (the
#                                     official image's default); `redis-cli` for the health check.
#   prom/prometheus:<tag>             Debian's prometheus (2.42, not the tag's version): the official image's
#                                     entrypoint and arguments (/etc/prometheus/prometheus.yml, /prometheus), as
#                                     user nobody; wget for the health check.
#   unleashorg/unleash-server:<tag>   node:24-bookworm-slim (base-image.sh) with the npm registry's unleash-server
#                                     of the tag's version, started as the official image does (`node index.js`:
#                                     unleash.start() configured from the environment), on :4242; wget.
#   mesh-local/haproxy-for-traefik    NOT Traefik (no binary of it here): Debian's haproxy, for the compose test's
#                                     substitute (deploy/compose/test-substitutes.yml), configured from the
#                                     phase's Traefik file by tests/containers/compose-stack.test.ts.
#   mesh-local/patroni:15             phase 4's database members (phases/phase4/compose.yml): Debian's patroni 3.0,
#                                     postgresql-15 and python3-etcd; no entrypoint of its own (the compose file
#                                     runs deploy/compose/patroni/entrypoint.sh). No official image exists: a
#                                     real deployment builds this one (or sets MESH_PATRONI_IMAGE).
#   quay.io/coreos/etcd:v3.4.23       Debian's etcd-server and etcd-client (3.4.23, the tag's version): `etcd`
#                                     and `etcdctl` on the PATH; the compose file gives etcd's arguments.
#   haproxy:2.6                       Debian's haproxy 2.6 with bash (the health check's /dev/tcp), run as the
#                                     compose file's command says; phase 4's database balancer.
#
# Grafana has no stand-in. Every image carries the label mesh-broker.stand-in=true.
#
#   scripts/containers/service-images.sh [--force] [--remove]
#
# --force rebuilds present images; --remove deletes the images this script makes (not the base images).
# Environment: DOCKER_HOST (default: this checkout's daemon, scripts/containers/dockerd.sh), CONTAINERS_DIR,
# BUILD_CA_CERTS (PEM for npm behind a TLS-inspecting proxy; default: /usr/local/share/ca-certificates/*.crt).
# Needs the daemon running, node:24-bookworm-slim present (base-image.sh) and its cached Debian tarball.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${CONTAINERS_DIR:-$ROOT/.workbench/containers}
DOCKER=/usr/bin/docker
export DOCKER_HOST=${DOCKER_HOST:-unix://$DIR/docker.sock}
export DOCKER_BUILDKIT=1
COMPOSE_FILE=$ROOT/deploy/compose/compose.yml
DEBIAN_TAR=$DIR/base/debian-bookworm-minbase.tar
DEBIAN_TAG=mesh-local/debian:bookworm
SERVICES_TAG=mesh-local/service-packages:bookworm
HAPROXY_TAG=mesh-local/haproxy-for-traefik:latest
FORCE=0
REMOVE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --remove) REMOVE=1 ;;
    *) echo "usage: service-images.sh [--force] [--remove]" >&2; exit 2 ;;
  esac
done

log() { echo "service-images: $*" >&2; }

# The image a service of the base compose file names (e.g. `postgres` → postgres:15).
image_of() {
  awk -v svc="  $1:" '$0 == svc { found = 1; next } found && /^  [a-z]/ { exit } found && $1 == "image:" { print $2; exit }' \
    "$COMPOSE_FILE"
}
POSTGRES_TAG=$(image_of postgres)
REDIS_TAG=$(image_of redis)
PROMETHEUS_TAG=$(image_of prometheus)
UNLEASH_TAG=$(image_of unleash)
for tag in "$POSTGRES_TAG" "$REDIS_TAG" "$PROMETHEUS_TAG" "$UNLEASH_TAG"; do
  [ -n "$tag" ] || { log "could not read the services' images from $COMPOSE_FILE"; exit 1; }
done
UNLEASH_VERSION=${UNLEASH_TAG##*:}
# Phase 4's images: the defaults of their variables in its override (e.g. ${MESH_ETCD_IMAGE:-…}).
PHASE4_FILE=$ROOT/phases/phase4/compose.yml
default_of() { sed -n "s/.*\${$1:-\([^}]*\)}.*/\1/p" "$PHASE4_FILE" | head -n 1; }
PATRONI_TAG=$(default_of MESH_PATRONI_IMAGE)
ETCD_TAG=$(default_of MESH_ETCD_IMAGE)
PG_BALANCER_TAG=$(default_of MESH_PG_BALANCER_IMAGE)
for tag in "$PATRONI_TAG" "$ETCD_TAG" "$PG_BALANCER_TAG"; do
  [ -n "$tag" ] || { log "could not read phase 4's images from $PHASE4_FILE"; exit 1; }
done

ALL=("$POSTGRES_TAG" "$REDIS_TAG" "$PROMETHEUS_TAG" "$UNLEASH_TAG" "$HAPROXY_TAG" "$PATRONI_TAG" "$ETCD_TAG"
  "$PG_BALANCER_TAG" "$SERVICES_TAG" "$DEBIAN_TAG")
if [ "$REMOVE" = 1 ]; then
  for tag in "${ALL[@]}"; do
    if "$DOCKER" image inspect "$tag" >/dev/null 2>&1; then
      [ "$("$DOCKER" image inspect -f '{{index .Config.Labels "mesh-broker.stand-in"}}' "$tag")" = true ] ||
        { log "$tag is not a stand-in made here; left"; continue; }
      "$DOCKER" image rm "$tag" >/dev/null && log "removed $tag"
    fi
  done
  exit 0
fi

present() { [ "$FORCE" = 0 ] && "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

"$DOCKER" image inspect node:24-bookworm-slim >/dev/null 2>&1 ||
  { log "node:24-bookworm-slim is missing: run scripts/containers/base-image.sh"; exit 1; }

CA=${BUILD_CA_CERTS:-$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true)}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# build TAG CONTEXT [ARGS…]: docker build with the stand-in label, its log kept when it fails.
build() {
  local tag=$1 context=$2 started=$SECONDS
  shift 2
  if ! "$DOCKER" build --progress=plain --label mesh-broker.stand-in=true -t "$tag" "$@" "$context" \
    >"$WORK/build.log" 2>&1; then
    tail -40 "$WORK/build.log" >&2
    log "building $tag failed"
    exit 1
  fi
  log "built $tag in $((SECONDS - started)) s"
}

# 1. Debian bookworm, as debootstrap made it (the cache of base-image.sh).
if ! present "$DEBIAN_TAG"; then
  [ -s "$DEBIAN_TAR" ] || { log "$DEBIAN_TAR is missing: run scripts/containers/base-image.sh"; exit 1; }
  "$DOCKER" import --change 'CMD ["bash"]' --change 'LABEL mesh-broker.stand-in=true' \
    "$DEBIAN_TAR" "$DEBIAN_TAG" >/dev/null
  log "imported $DEBIAN_TAG"
fi

# 2. Debian's packages of the services, installed once for all the Debian-based stand-ins.
if ! present "$SERVICES_TAG"; then
  mkdir -p "$WORK/packages"
  cat >"$WORK/packages/Dockerfile" <<DOCKERFILE
FROM $DEBIAN_TAG
RUN rm -f /etc/apt/sources.list \\
 && printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' >/etc/apt/sources.list.d/debian.sources \\
 && mkdir -p /etc/postgresql-common \\
 && echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf \\
 && apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      postgresql-15 redis-server redis-tools prometheus haproxy wget ca-certificates >/dev/null \\
 && apt-get clean && rm -rf /var/lib/apt/lists/*
DOCKERFILE
  build "$SERVICES_TAG" "$WORK/packages"
fi

# 3. postgres
if ! present "$POSTGRES_TAG"; then
  mkdir -p "$WORK/postgres"
  cat >"$WORK/postgres/docker-entrypoint.sh" <<'ENTRY'
#!/bin/bash
# Stand-in for the official postgres image's entrypoint (scripts/containers/service-images.sh).
set -euo pipefail
if [ "${1:-}" = postgres ] && [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?the stand-in postgres image needs POSTGRES_PASSWORD, as the official one does}"
  export POSTGRES_USER=${POSTGRES_USER:-postgres}
  export POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA" >/dev/null
  printf '\nhost all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  # The temporary server: the Unix socket only, as the official image's.
  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 -X -q --username "$POSTGRES_USER" --dbname postgres \
      -c "CREATE DATABASE \"$POSTGRES_DB\""
  fi
  for file in /docker-entrypoint-initdb.d/*; do
    [ -e "$file" ] || continue
    case "$file" in
      *.sh)
        echo "stand-in postgres: running $file"
        if [ -x "$file" ]; then "$file"; else . "$file"; fi
        ;;
      *.sql)
        echo "stand-in postgres: running $file"
        psql -v ON_ERROR_STOP=1 -X -q --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" -f "$file"
        ;;
      *) echo "stand-in postgres: ignoring $file" ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "stand-in postgres: init process complete"
fi
if [ "${1:-}" = postgres ]; then
  shift
  exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"
ENTRY
  cat >"$WORK/postgres/Dockerfile" <<DOCKERFILE
FROM $SERVICES_TAG
LABEL org.opencontainers.image.description="STAND-IN for $POSTGRES_TAG: Debian's postgresql-15 (scripts/containers/service-images.sh)"
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PGDATA=/var/lib/postgresql/data
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 755 /usr/local/bin/docker-entrypoint.sh && mkdir -p /docker-entrypoint-initdb.d "\$PGDATA"
VOLUME /var/lib/postgresql/data
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
DOCKERFILE
  build "$POSTGRES_TAG" "$WORK/postgres"
fi

# 4. redis
if ! present "$REDIS_TAG"; then
  mkdir -p "$WORK/redis"
  cat >"$WORK/redis/docker-entrypoint.sh" <<'ENTRY'
#!/bin/sh
# Stand-in for the official redis image's entrypoint (scripts/containers/service-images.sh).
set -e
case "${1:-}" in
  -* | *.conf) set -- redis-server "$@" ;;
esac
if [ "${1:-}" = redis-server ]; then
  # The official image is built with protected mode off (it is reached over the container network).
  set -- "$@" --protected-mode no
  if [ "$(id -u)" = 0 ]; then
    chown -R redis:redis /data 2>/dev/null || true
    exec setpriv --reuid=redis --regid=redis --init-groups "$@"
  fi
fi
exec "$@"
ENTRY
  cat >"$WORK/redis/Dockerfile" <<DOCKERFILE
FROM $SERVICES_TAG
LABEL org.opencontainers.image.description="STAND-IN for $REDIS_TAG: Debian's redis-server (scripts/containers/service-images.sh)"
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 755 /usr/local/bin/docker-entrypoint.sh && mkdir -p /data && chown redis:redis /data
VOLUME /data
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
DOCKERFILE
  build "$REDIS_TAG" "$WORK/redis"
fi

# 5. prometheus
if ! present "$PROMETHEUS_TAG"; then
  mkdir -p "$WORK/prometheus"
  cat >"$WORK/prometheus/Dockerfile" <<DOCKERFILE
FROM $SERVICES_TAG
LABEL org.opencontainers.image.description="STAND-IN for $PROMETHEUS_TAG: Debian's prometheus 2.42 (scripts/containers/service-images.sh)"
RUN mkdir -p /etc/prometheus /prometheus && chown nobody:nogroup /prometheus \\
 && ln -sf /usr/bin/prometheus /usr/local/bin/prometheus
USER nobody
EXPOSE 9090
VOLUME ["/prometheus"]
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
DOCKERFILE
  build "$PROMETHEUS_TAG" "$WORK/prometheus"
fi

# 6. unleash: the npm registry's unleash-server on the locally made Node image.
if ! present "$UNLEASH_TAG"; then
  mkdir -p "$WORK/unleash"
  cat >"$WORK/unleash/index.js" <<'INDEX'
'use strict';
// As the official image's index.js: Unleash configured from its environment variables (DATABASE_*,
// INIT_*_API_TOKENS, UNLEASH_DEFAULT_ADMIN_*, …), on port 4242 of every interface.
const unleash = require('unleash-server');
unleash.start().catch((error) => {
  console.error(error);
  process.exit(1);
});
process.on('SIGTERM', () => process.exit(0));
INDEX
  cat >"$WORK/unleash/Dockerfile" <<DOCKERFILE
FROM node:24-bookworm-slim
ARG BUILD_CA_CERTS=""
LABEL org.opencontainers.image.description="STAND-IN for $UNLEASH_TAG: the npm registry's unleash-server $UNLEASH_VERSION on node:24-bookworm-slim (scripts/containers/service-images.sh)"
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wget >/dev/null \\
 && apt-get clean && rm -rf /var/lib/apt/lists/*
WORKDIR /unleash
RUN if [ -n "\$BUILD_CA_CERTS" ]; then printf '%s\n' "\$BUILD_CA_CERTS" >/tmp/build-ca.pem; \\
      export NODE_EXTRA_CA_CERTS=/tmp/build-ca.pem; fi \\
 && npm init -y >/dev/null \\
 && npm install --omit=dev --ignore-scripts --no-audit --no-fund --no-update-notifier unleash-server@$UNLEASH_VERSION \\
 && rm -rf /tmp/build-ca.pem /root/.npm \\
 && wget --version >/dev/null
COPY index.js ./
ENV NODE_ENV=production
USER node
EXPOSE 4242
CMD ["node", "index.js"]
DOCKERFILE
  build "$UNLEASH_TAG" "$WORK/unleash" --build-arg "BUILD_CA_CERTS=$CA"
fi

# 7. HAProxy, the compose test's labelled substitute for Traefik.
if ! present "$HAPROXY_TAG"; then
  mkdir -p "$WORK/haproxy"
  cat >"$WORK/haproxy/Dockerfile" <<DOCKERFILE
FROM $SERVICES_TAG
LABEL org.opencontainers.image.description="SUBSTITUTE for Traefik (no Traefik binary here): Debian's haproxy, configured from the phase's Traefik file (deploy/compose/test-substitutes.yml)"
RUN mkdir -p /usr/local/etc/haproxy
STOPSIGNAL SIGUSR1
ENTRYPOINT ["haproxy", "-W", "-db"]
CMD ["-f", "/usr/local/etc/haproxy/haproxy.cfg"]
DOCKERFILE
  build "$HAPROXY_TAG" "$WORK/haproxy"
fi

# 8. Phase 4's database: Patroni members, etcd, and the balancer in front of them.
if ! present "$PATRONI_TAG"; then
  mkdir -p "$WORK/patroni"
  cat >"$WORK/patroni/Dockerfile" <<DOCKERFILE
FROM $SERVICES_TAG
LABEL org.opencontainers.image.description="Phase 4's Patroni member: Debian's patroni, postgresql-15 and python3-etcd (scripts/containers/service-images.sh)"
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patroni python3-etcd >/dev/null \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* \\
 && patroni --version
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EXPOSE 5432 8008
CMD ["patroni", "--help"]
DOCKERFILE
  build "$PATRONI_TAG" "$WORK/patroni"
fi
if ! present "$ETCD_TAG"; then
  mkdir -p "$WORK/etcd"
  cat >"$WORK/etcd/Dockerfile" <<DOCKERFILE
FROM $SERVICES_TAG
LABEL org.opencontainers.image.description="STAND-IN for $ETCD_TAG: Debian's etcd-server and etcd-client (scripts/containers/service-images.sh)"
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server etcd-client >/dev/null \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* \\
 && etcd --version && mkdir -p /var/lib/etcd
EXPOSE 2379 2380
CMD ["etcd"]
DOCKERFILE
  build "$ETCD_TAG" "$WORK/etcd"
fi
if ! present "$PG_BALANCER_TAG"; then
  mkdir -p "$WORK/pg-balancer"
  cat >"$WORK/pg-balancer/Dockerfile" <<DOCKERFILE
FROM $SERVICES_TAG
LABEL org.opencontainers.image.description="STAND-IN for $PG_BALANCER_TAG: Debian's haproxy (scripts/containers/service-images.sh)"
RUN mkdir -p /usr/local/etc/haproxy
STOPSIGNAL SIGUSR1
CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
DOCKERFILE
  build "$PG_BALANCER_TAG" "$WORK/pg-balancer"
fi

log "ready: $POSTGRES_TAG $REDIS_TAG $PROMETHEUS_TAG $UNLEASH_TAG $HAPROXY_TAG $PATRONI_TAG $ETCD_TAG $PG_BALANCER_TAG"
