#!/usr/bin/env bash
# HAProxy is the local load balancer (`workbench up`, the cluster tests). Installs it from Debian's
# packages when it is missing (the machines of this project run as root; elsewhere, say how).
set -euo pipefail
command -v haproxy >/dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing HAProxy (apt-get)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends haproxy >/dev/null
else
  echo "HAProxy is missing: apt-get update && apt-get install -y --no-install-recommends haproxy" >&2
  exit 1
fi
