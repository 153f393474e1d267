#!/bin/sh
# The stack's databases and roles, made once: the Postgres image runs the files of
# /docker-entrypoint-initdb.d on the first start of an empty data volume only (a password changed later is
# changed with ALTER ROLE, docs/deploy.md). The superuser (POSTGRES_PASSWORD) is for this and for operators;
# no service connects as it.
#
#   mesh_owner   owns database meshbroker and its schemas; runs the migrations (the one-shot `migrate`
#                service). Not a superuser, cannot create roles or databases.
#   mesh_broker  what the brokers connect as: reads and writes the rows of the tables they use (the audit
#                log: read and append only), EXECUTE on accept_messages; no DDL, no TRUNCATE, no CREATE on
#                the database or any schema, no temp tables. Brokers run no migration: the owner does.
#   mesh_verifier  what the audit verifier connects as: SELECT on audit_log, its own progress table
#                (read and upserted); nothing else.
#   unleash      owns database unleash; nothing else.
#
# The grants on the tables are migration 0014's (migrations/0014_least_privilege_roles.sql), which finds
# these roles by the names this script records on the database (mesh.broker_role, mesh.verifier_role).
# Their search_path is pinned in the database here, and again by the brokers and the verifier at connect.
#
# 20-grafana.sh, run next, adds Grafana's role.
#
# Role and database names may be changed through the variables below (the tests run this script against a
# shared server under other names); the compose files use the defaults.
set -eu

: "${MESH_OWNER_DB_PASSWORD:?set MESH_OWNER_DB_PASSWORD}"
: "${MESH_BROKER_DB_PASSWORD:?set MESH_BROKER_DB_PASSWORD}"
: "${MESH_VERIFIER_DB_PASSWORD:?set MESH_VERIFIER_DB_PASSWORD}"
: "${UNLEASH_DB_PASSWORD:?set UNLEASH_DB_PASSWORD}"
MESH_DB_NAME="${MESH_DB_NAME:-meshbroker}"
MESH_OWNER_ROLE="${MESH_OWNER_ROLE:-mesh_owner}"
MESH_BROKER_ROLE="${MESH_BROKER_ROLE:-mesh_broker}"
MESH_VERIFIER_ROLE="${MESH_VERIFIER_ROLE:-mesh_verifier}"
UNLEASH_DB_NAME="${UNLEASH_DB_NAME:-unleash}"
UNLEASH_DB_ROLE="${UNLEASH_DB_ROLE:-unleash}"

run_psql() {
  psql -v ON_ERROR_STOP=1 -X -q --username "${POSTGRES_USER:-postgres}" \
    -v owner="$MESH_OWNER_ROLE" -v owner_password="$MESH_OWNER_DB_PASSWORD" \
    -v broker="$MESH_BROKER_ROLE" -v broker_password="$MESH_BROKER_DB_PASSWORD" \
    -v verifier="$MESH_VERIFIER_ROLE" -v verifier_password="$MESH_VERIFIER_DB_PASSWORD" \
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
CREATE ROLE :"verifier" LOGIN PASSWORD :'verifier_password';
CREATE DATABASE :"mesh_db" OWNER :"owner";
-- Read by migration 0014, which grants these roles on the tables.
ALTER DATABASE :"mesh_db" SET mesh.broker_role = :'broker';
ALTER DATABASE :"mesh_db" SET mesh.verifier_role = :'verifier';
-- Names resolve in public (and pg_catalog), never in a schema of the role's or a temp table.
ALTER ROLE :"broker" IN DATABASE :"mesh_db" SET search_path = pg_catalog, public, pg_temp;
ALTER ROLE :"verifier" IN DATABASE :"mesh_db" SET search_path = pg_catalog, public, pg_temp;
SQL

run_psql --dbname "$MESH_DB_NAME" <<'SQL'
REVOKE ALL ON DATABASE :"mesh_db" FROM PUBLIC;
-- CONNECT only: no CREATE (a schema of their own) and no TEMPORARY (a temp table shadows public's).
GRANT CONNECT ON DATABASE :"mesh_db" TO :"broker", :"verifier";
-- public belongs to the owner; nobody else creates objects in it.
ALTER SCHEMA public OWNER TO :"owner";
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO :"broker", :"verifier";
-- The migrator's bookkeeping schema: the brokers and the verifier read it (a broker refuses to start while
-- the migrations are behind its release), only the owner writes it.
CREATE SCHEMA drizzle AUTHORIZATION :"owner";
GRANT USAGE ON SCHEMA drizzle TO :"broker", :"verifier";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA drizzle GRANT SELECT ON TABLES TO :"broker", :"verifier";
SQL
