# The broker's image (docs/container-image.md). Multi-stage: `build` compiles the TypeScript with every
# dependency; `deps` installs the production dependencies only; the runtime stage holds those, the compiled
# dist/ and the files a node reads at run time, and runs as the unprivileged `node` user of the base image.
#
#   docker build -t mesh-broker:latest .
#   docker run -p 127.0.0.1:8080:8080 -e DATABASE_URL=… -e REDIS_URL=… -e ADMIN_TOKEN=… -e BUS_SECRET=… mesh-broker:latest
#
# The base is the official Node LTS image. Where no registry is reachable, scripts/containers/base-image.sh
# makes an image of that name locally, so this file is the same either way.
#
# BUILD_CA_CERTS (build argument, PEM): certificates npm should trust while it fetches packages, for builds
# behind a TLS-inspecting proxy. Used by the build stages only; nothing of it reaches the runtime image.
ARG NODE_IMAGE=node:24-bookworm-slim

FROM ${NODE_IMAGE} AS build
ARG BUILD_CA_CERTS=""
WORKDIR /src
# The workspace package (client/, @mesh-broker/sdk): npm ci links it and needs its package.json.
COPY package.json package-lock.json ./
COPY client/package.json ./client/
# No install scripts: compiling needs none (the dev tools' scripts fetch binaries or build optional addons).
RUN if [ -n "$BUILD_CA_CERTS" ]; then printf '%s\n' "$BUILD_CA_CERTS" >/tmp/build-ca.pem; \
      export NODE_EXTRA_CA_CERTS=/tmp/build-ca.pem; fi \
 && npm ci --ignore-scripts --no-audit --no-fund --no-update-notifier \
 && rm -f /tmp/build-ca.pem
COPY tsconfig.json tsconfig.build.json ./
COPY broker ./broker
COPY cli ./cli
COPY client ./client
COPY flags ./flags
COPY protocol ./protocol
COPY bench ./bench
RUN npm run build

FROM ${NODE_IMAGE} AS deps
ARG BUILD_CA_CERTS=""
WORKDIR /app
COPY package.json package-lock.json ./
COPY client/package.json ./client/
# The production dependencies have no install scripts.
RUN if [ -n "$BUILD_CA_CERTS" ]; then printf '%s\n' "$BUILD_CA_CERTS" >/tmp/build-ca.pem; \
      export NODE_EXTRA_CA_CERTS=/tmp/build-ca.pem; fi \
 && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --no-update-notifier \
 && rm -f /tmp/build-ca.pem

FROM ${NODE_IMAGE}
# The commit the image is built from (`docker build --build-arg BUILD_COMMIT=$(git rev-parse HEAD)`): the
# `commit` label of mesh_broker_build_info (broker/build-info.ts); unset, it reads `unknown`.
ARG BUILD_COMMIT=""
LABEL org.opencontainers.image.title="mesh-broker" \
      org.opencontainers.image.description="Mesh broker node (workbench broker); also runs the other workbench commands"
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    STATE_DIR=/var/lib/mesh-broker \
    MESH_BUILD_COMMIT=${BUILD_COMMIT}
WORKDIR /app
# Owned by root and read-only to the broker; only STATE_DIR is writable.
COPY package.json package-lock.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /src/dist ./dist
# The SDK's build, which node_modules/@mesh-broker/sdk links to (the workbench's load, smoke and chaos peers).
COPY --from=build /src/client/package.json ./client/
COPY --from=build /src/client/dist ./client/dist
# Read at run time: migrations (applied at start), the flags files (FLAGS_DIR default), the phases' flag
# presets and smoke expectations (promote, smoke), the console's static files.
COPY migrations ./migrations
COPY flags/environments ./flags/environments
COPY phases ./phases
COPY cli/console/static ./cli/console/static
RUN mkdir -p /var/lib/mesh-broker && chown node:node /var/lib/mesh-broker && chmod 700 /var/lib/mesh-broker
VOLUME ["/var/lib/mesh-broker"]
USER node
EXPOSE 8080
# /health on the node's own port (HOST 0.0.0.0 or :: is asked on loopback). 200 when PostgreSQL answers.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "const h=process.env.HOST;const a=!h||h==='0.0.0.0'||h==='::'?'127.0.0.1':h.includes(':')?'['+h+']':h;fetch('http://'+a+':'+(process.env.PORT||8080)+'/health',{signal:AbortSignal.timeout(4000)}).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# Node is PID 1 (no init needed): `workbench broker` handles SIGTERM and SIGINT itself (drains, then exits 0)
# and starts no child processes. `docker run --init` / compose `init: true` add tini if wanted.
ENTRYPOINT ["node", "/app/dist/cli/main.js"]
CMD ["broker"]
