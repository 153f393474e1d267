#!/bin/sh
# The stack's databases and roles, made once: the Postgres image runs the files of
# /docker-entrypoint-initdb.d on the first start of an empty data volume only (a password changed later is
# changed with ALTER ROLE, docs/deploy.md). The superuser (POSTGRES_PASSWORD) is for this and for operators;
# no service connects as it.
#
#   mesh_owner   owns database meshbroker and its schemas; runs the migrations (the one-shot `migrate`
#                service). Not a superuser, cannot create roles or databases.
#   mesh_broker  what the brokers, the audit verifier and the workbench connect as: reads and writes the
#                tables (SELECT, INSERT, UPDATE, DELETE; sequences), no DDL on the tables and no TRUNCATE.
#                It also has CREATE on the database and on schema drizzle, because a broker checks the
#                migrations at start (drizzle's migrator runs CREATE SCHEMA / CREATE TABLE IF NOT EXISTS on
#                its bookkeeping table, which Postgres checks for privilege even when they exist). With
#                the migrations applied that check does nothing; a broker of a newer release than the
#                migrations fails at start (it cannot create tables in public) instead of migrating.
#   unleash      owns database unleash; nothing else.
#
# 20-grafana.sh, run next, adds Grafana's role.
#
# Role and database names may be changed through the variables below (the tests run this script against a
# shared server under other names); the compose files use the defaults.
set -eu

: "${MESH_OWNER_DB_PASSWORD:?set MESH_OWNER_DB_PASSWORD}"
: "${MESH_BROKER_DB_PASSWORD:?set MESH_BROKER_DB_PASSWORD}"
: "${UNLEASH_DB_PASSWORD:?set UNLEASH_DB_PASSWORD}"
MESH_DB_NAME="${MESH_DB_NAME:-meshbroker}"
MESH_OWNER_ROLE="${MESH_OWNER_ROLE:-mesh_owner}"
MESH_BROKER_ROLE="${MESH_BROKER_ROLE:-mesh_broker}"
UNLEASH_DB_NAME="${UNLEASH_DB_NAME:-unleash}"
UNLEASH_DB_ROLE="${UNLEASH_DB_ROLE:-unleash}"

run_psql() {
  psql -v ON_ERROR_STOP=1 -X -q --username "${POSTGRES_USER:-postgres}" \
    -v owner="$MESH_OWNER_ROLE" -v owner_password="$MESH_OWNER_DB_PASSWORD" \
    -v broker="$MESH_BROKER_ROLE" -v broker_password="$MESH_BROKER_DB_PASSWORD" \
    -v unleash="$UNLEASH_DB_ROLE" -v unleash_password="$UNLEASH_DB_PASSWORD" \
    -v mesh_db="$MESH_DB_NAME" -v unleash_db="$UNLEASH_DB_NAME" "$@"
}

# While this runs, the image's temporary server listens on its Unix socket only; the health check asks over
# TCP (pg_isready -h 127.0.0.1), so nothing is told "healthy" before this script has finished.
run_psql --dbname postgres <<'SQL'
CREATE ROLE :"unleash" LOGIN PASSWORD :'unleash_password';
CREATE DATABASE :"unleash_db" OWNER :"unleash";
REVOKE ALL ON DATABASE :"unleash_db" FROM PUBLIC;
CREATE ROLE :"owner" LOGIN PASSWORD :'owner_password';
CREATE ROLE :"broker" LOGIN PASSWORD :'broker_password';
CREATE DATABASE :"mesh_db" OWNER :"owner";
SQL

run_psql --dbname "$MESH_DB_NAME" <<'SQL'
REVOKE ALL ON DATABASE :"mesh_db" FROM PUBLIC;
GRANT CONNECT, TEMPORARY, CREATE ON DATABASE :"mesh_db" TO :"broker";
-- public belongs to the owner; nobody else creates objects in it.
ALTER SCHEMA public OWNER TO :"owner";
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO :"broker";
-- The migrator's bookkeeping schema, made here so its grants exist before the first migration.
CREATE SCHEMA drizzle AUTHORIZATION :"owner";
GRANT USAGE, CREATE ON SCHEMA drizzle TO :"broker";
-- Whatever the owner creates from now on (every migration), the brokers may read and write.
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"broker";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public
  GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO :"broker";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO :"broker";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA drizzle GRANT SELECT ON TABLES TO :"broker";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA drizzle GRANT USAGE, SELECT ON SEQUENCES TO :"broker";
SQL
