#!/bin/sh
# Grafana's role in the stack's database, for the dashboard's annotations (docs/observability.md). Run by the
# Postgres image after 10-roles.sh on the first start of an empty volume; on a volume made before this file
# existed, run it once by hand (it refuses to run twice: the role exists):
#
#   docker compose exec postgres sh /docker-entrypoint-initdb.d/20-grafana.sh
#
#   mesh_grafana may call grafana.flag_changes(from, to) and grafana.promotions(from, to) and nothing else:
#                no table of public, not even audit_log (it holds every mesh's events: who messaged whom).
#
# Names may be changed through the variables below, as in 10-roles.sh.
set -eu

: "${GRAFANA_DB_PASSWORD:?set GRAFANA_DB_PASSWORD}"
MESH_DB_NAME="${MESH_DB_NAME:-meshbroker}"
MESH_OWNER_ROLE="${MESH_OWNER_ROLE:-mesh_owner}"
GRAFANA_DB_ROLE="${GRAFANA_DB_ROLE:-mesh_grafana}"

run_psql() {
  psql -v ON_ERROR_STOP=1 -X -q --username "${POSTGRES_USER:-postgres}" \
    -v owner="$MESH_OWNER_ROLE" -v grafana="$GRAFANA_DB_ROLE" -v grafana_password="$GRAFANA_DB_PASSWORD" \
    -v mesh_db="$MESH_DB_NAME" "$@"
}

# Grafana's annotations: two functions that return (time, text, tags) rows as Grafana's SQL annotations
# read them, owned by the schema owner and run with its rights (SECURITY DEFINER), so that the Grafana
# role sees flag changes and promotions without SELECT on any table. They read tables the migrations make
# later: their bodies are checked when called, not now (check_function_bodies off).
# tests/process/compose-db-roles.test.ts runs the dashboard's own queries through them.
run_psql --dbname "$MESH_DB_NAME" <<'SQL'
CREATE ROLE :"grafana" LOGIN PASSWORD :'grafana_password';
GRANT CONNECT ON DATABASE :"mesh_db" TO :"grafana";
CREATE SCHEMA grafana AUTHORIZATION :"owner";
REVOKE ALL ON SCHEMA grafana FROM PUBLIC;
GRANT USAGE ON SCHEMA grafana TO :"grafana";
SET check_function_bodies = off;

-- Every flag change of every environment: the cluster audit chain's flag.changed events (flags/changes.ts).
CREATE FUNCTION grafana.flag_changes(since timestamptz, until timestamptz)
  RETURNS TABLE ("time" timestamptz, text text, tags text)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
  SELECT a.created_at,
         format('%s %s → %s by %s (%s)', a.payload->>'flag',
                CASE WHEN (a.payload->>'from')::boolean THEN 'on' ELSE 'off' END,
                CASE WHEN (a.payload->>'to')::boolean THEN 'on' ELSE 'off' END,
                a.actor, a.payload->>'environment'),
         concat_ws(',', 'flag', a.payload->>'flag', a.payload->>'environment')
    FROM public.audit_log a
   WHERE a.mesh_id = '00000000-0000-0000-0000-000000000000' AND a.event_type = 'flag.changed'
     AND a.created_at BETWEEN since AND until
   ORDER BY a.created_at
$$;

-- Every promotion and rollback, whatever its outcome (cli/promotion/promote.ts).
CREATE FUNCTION grafana.promotions(since timestamptz, until timestamptz)
  RETURNS TABLE ("time" timestamptz, text text, tags text)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
  SELECT p.created_at,
         format('%s: phase %s → %s by %s (%s)%s', p.status, p.from_phase, p.to_phase, p.actor, p.environment,
                CASE WHEN p.failed_check IS NULL THEN '' ELSE format(', failed check: %s', p.failed_check) END),
         concat_ws(',', 'promotion', p.status, p.environment)
    FROM public.promotions p
   WHERE p.created_at BETWEEN since AND until
   ORDER BY p.created_at
$$;

ALTER FUNCTION grafana.flag_changes(timestamptz, timestamptz) OWNER TO :"owner";
ALTER FUNCTION grafana.promotions(timestamptz, timestamptz) OWNER TO :"owner";
-- Functions are executable by PUBLIC unless revoked.
REVOKE ALL ON FUNCTION grafana.flag_changes(timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION grafana.promotions(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION grafana.flag_changes(timestamptz, timestamptz) TO :"grafana";
GRANT EXECUTE ON FUNCTION grafana.promotions(timestamptz, timestamptz) TO :"grafana";
SQL
