#!/bin/sh
# Patroni's post_bootstrap (deploy/compose/patroni/entrypoint.sh): run once, by the member that bootstraps
# the cluster, as the postgres user, on the new leader (its Unix socket, peer authentication), before the
# leader's /primary answers 200. It makes the same databases and roles as the single Postgres of phases 0-3
# does (the same files: deploy/compose/postgres-init, mounted here at /docker-entrypoint-initdb.d), so the
# brokers connect as mesh_broker, never as the superuser. Replicas copy them with everything else.
# Patroni passes a connection string as $1; the scripts use the socket instead.
set -eu
for file in /docker-entrypoint-initdb.d/*.sh; do
  echo "post-bootstrap: running $file"
  sh "$file"
done
