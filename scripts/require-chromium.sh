#!/usr/bin/env bash
# Chromium runs the console's browser tests headless (tests/cluster/console.test.ts, driven by
# playwright-core, which downloads no browser of its own). Installs Debian's package when /usr/bin/chromium
# is missing (the machines of this project run as root; elsewhere, say how).
set -euo pipefail
[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing Chromium (apt-get)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
else
  echo "Chromium is missing: apt-get update && apt-get install -y --no-install-recommends chromium" >&2
  exit 1
fi
