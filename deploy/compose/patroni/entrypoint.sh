#!/bin/sh
# A Patroni member of phase 4's compose database (phases/phase4/compose.yml, docs/deploy.md § Phase 4's
# database). Run as root by the container: it writes Patroni's configuration, makes the folders Postgres
# needs owned by the postgres user (Postgres refuses root), and then runs Patroni as that user.
#
# The configuration file holds no secret: the passwords reach Patroni through its own environment variables
# (PATRONI_SUPERUSER_PASSWORD, PATRONI_REPLICATION_PASSWORD, PATRONI_RESTAPI_PASSWORD), as do the member's
# name and addresses (PATRONI_NAME, PATRONI_*_CONNECT_ADDRESS), which the compose file sets per member.
# Its shape is the simulation's (cli/cluster/patroni.ts): the same timings, pg_rewind and replication slots,
# synchronous mode as a choice (MESH_PATRONI_SYNCHRONOUS), and passwords (scram-sha-256) instead of trust.
set -eu

: "${PATRONI_NAME:?set PATRONI_NAME (the member's name)}"
: "${PATRONI_SUPERUSER_PASSWORD:?set PATRONI_SUPERUSER_PASSWORD}"
: "${PATRONI_REPLICATION_PASSWORD:?set PATRONI_REPLICATION_PASSWORD}"
: "${PATRONI_RESTAPI_PASSWORD:?set PATRONI_RESTAPI_PASSWORD}"
# Only these two words: a typo must stop the member, not silently pick a mode.
case "${MESH_PATRONI_SYNCHRONOUS:-false}" in
  true | false) synchronous=${MESH_PATRONI_SYNCHRONOUS:-false} ;;
  *)
    echo "patroni entrypoint: MESH_PATRONI_SYNCHRONOUS must be true or false, not \"$MESH_PATRONI_SYNCHRONOUS\"" >&2
    exit 2
    ;;
esac

HOME_DIR=/var/lib/postgresql
CONFIG=$HOME_DIR/patroni.yml
mkdir -p "$HOME_DIR/patroni" /var/run/postgresql
chown postgres:postgres "$HOME_DIR" "$HOME_DIR/patroni" /var/run/postgresql
chmod 700 "$HOME_DIR/patroni"

# bootstrap.dcs is read once, by the member that bootstraps the cluster; afterwards the cluster's settings
# live in etcd (change them with `patronictl edit-config`, e.g. synchronous_mode on a running cluster).
umask 077
cat >"$CONFIG" <<YAML
scope: mesh-broker
log:
  level: INFO
restapi:
  listen: 0.0.0.0:8008
  # PATRONI_RESTAPI_CONNECT_ADDRESS, PATRONI_RESTAPI_USERNAME and PATRONI_RESTAPI_PASSWORD from the
  # environment: the checks (GET) stay open to HAProxy, a switchover or restart (POST) needs the password.
etcd3:
  # The one etcd of the stack (PATRONI_ETCD3_HOSTS overrides it).
  hosts: etcd:2379
bootstrap:
  dcs:
    # Patroni's rule: loop_wait + 2 x retry_timeout <= ttl. A primary that cannot renew its leader key
    # within ttl demotes itself; a replica takes the key once it expired.
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    # Not strict: with the standby gone the primary goes on alone (availability over durability then).
    synchronous_mode: $synchronous
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 128MB
        hot_standby: "on"
        password_encryption: scram-sha-256
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - auth-local: peer
    - auth-host: scram-sha-256
  # The same as postgresql.pg_hba below (Patroni writes this one at bootstrap, that one at every start).
  pg_hba:
    - local all all peer
    - host replication replicator all scram-sha-256
    - host all all all scram-sha-256
  # The stack's databases and roles (deploy/compose/postgres-init), once, on the new leader.
  post_bootstrap: sh /etc/mesh-patroni/post-bootstrap.sh
postgresql:
  listen: 0.0.0.0:5432
  data_dir: $HOME_DIR/patroni/data
  bin_dir: /usr/lib/postgresql/15/bin
  pgpass: $HOME_DIR/patroni/pgpass
  # A replica's clone asks the leader for an immediate checkpoint: the default (spread) one makes an idle
  # leader's replica wait minutes for its first base backup (seen in tests/containers/phase4-database.test.ts).
  basebackup:
    - checkpoint: fast
  # The socket is for this container only (peer: the postgres user of the container); everything over
  # TCP gives a password.
  pg_hba:
    - local all all peer
    - host replication replicator all scram-sha-256
    - host all all all scram-sha-256
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: /var/run/postgresql
YAML
chown postgres:postgres "$CONFIG"
exec setpriv --reuid=postgres --regid=postgres --init-groups env HOME="$HOME_DIR" patroni "$CONFIG"
