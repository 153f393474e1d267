#!/usr/bin/env bash
# Prometheus (and promtool) check the dashboard and the shipped Prometheus configs for real
# (tests/cluster/prometheus.test.ts). Installs Debian's package when missing (the machines of this project
# run as root; elsewhere, say how). The package's service is not started: the test runs its own
# throw-away Prometheus on a loopback port.
set -euo pipefail
command -v prometheus >/dev/null && command -v promtool >/dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing Prometheus (apt-get)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
else
  echo "Prometheus is missing: apt-get update && apt-get install -y --no-install-recommends prometheus" >&2
  exit 1
fi
