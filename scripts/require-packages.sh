#!/usr/bin/env bash
# The Debian packages the project runs for real, installed when missing (one apt-get update for all):
#   haproxy     the local load balancer (`workbench up`, the cluster tests)
#   prometheus  Prometheus and promtool: the dashboard's queries and the shipped configs are checked for
#               real (tests/cluster/prometheus.test.ts); the package's service is not started
#   chromium    the console's browser tests, headless, driven by playwright-core (which downloads no browser)
#   docker-compose  Debian's docker-compose 1.29: the compose files are merged and checked with its
#               `config` (tests/unit/compose-files.test.ts), which needs no container engine
#   docker.io   Debian's dockerd 20.10 and client, for `npm run test:containers` (a daemon of the checkout's own,
#               scripts/containers/dockerd.sh; the package's service is not started)
#   debootstrap the root filesystems of the locally made base images (scripts/containers/base-image.sh)
#   patroni     phase 4's Postgres HA engine in the two-region simulation (cli/cluster/patroni.ts), with
#   etcd-server its leader key store, and python3-etcd, the etcd client Patroni uses
#   faketime    libfaketime: `workbench chaos`'s clock-skew fault starts a broker under it (docs/chaos.md)
# The machines of this project run as root; elsewhere it says what to install.
# Usage: scripts/require-packages.sh PACKAGE...
set -euo pipefail

present() {
  case "$1" in
    haproxy) command -v haproxy >/dev/null ;;
    prometheus) command -v prometheus >/dev/null && command -v promtool >/dev/null ;;
    chromium) [ -x /usr/bin/chromium ] ;;
    docker-compose) command -v docker-compose >/dev/null ;;
    docker.io) [ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ] ;;
    debootstrap) [ -x /usr/sbin/debootstrap ] ;;
    patroni) command -v patroni >/dev/null && command -v patronictl >/dev/null ;;
    etcd-server) command -v etcd >/dev/null ;;
    python3-etcd) /usr/bin/python3 -c 'import etcd' 2>/dev/null ;;
    faketime) command -v faketime >/dev/null ;;
    *) echo "require-packages: unknown package $1" >&2; exit 2 ;;
  esac
}

missing=()
for package in "$@"; do present "$package" || missing+=("$package"); done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing ${missing[*]} (apt-get)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "missing: ${missing[*]}: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
