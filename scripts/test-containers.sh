#!/usr/bin/env bash
# `npm run test:containers`: the container image and phase 3's compose stack under a real engine
# (tests/containers, docs/container-image.md). Not part of `npm test`: it needs root and minutes of image
# building. Installs what it needs from Debian's packages when missing, like scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/require-packages.sh docker.io docker-compose debootstrap
exec npx vitest run --config tests/containers/vitest.config.ts "$@"
