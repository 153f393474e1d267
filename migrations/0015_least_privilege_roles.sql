-- Least-privilege database roles (issue 25 item 5; docs/design.md § Database roles). Whoever runs the
-- migrations (the owner: mesh_owner in the compose stack, the workbench's own user elsewhere) owns every
-- table; the brokers and the audit verifier connect as roles that own nothing and create nothing:
--
--   mesh_broker    rows of the tables the brokers use (audit_log: read and append only), EXECUTE on
--                  accept_messages, USAGE on the sequences; no CREATE on the database or any schema, no TEMP.
--   mesh_verifier  SELECT on audit_log; its own progress table (audit_verifier_progress) read and upserted;
--                  nothing else.
--
-- Roles are cluster-wide and one Postgres server may hold many databases (the tests make one per file), so
-- each role is made only when missing (an owner without CREATEROLE relies on the init script having made
-- it, deploy/compose/postgres-init/10-roles.sh) and every grant is per database. A role made here has no
-- password: it logs in only where pg_hba.conf trusts it (a workbench or a test server); a deployment makes it
-- first, with a password. A database may name other roles (ALTER DATABASE … SET mesh.broker_role / mesh.verifier_role).
DO $$
DECLARE
	broker text := coalesce(nullif(current_setting('mesh.broker_role', true), ''), 'mesh_broker');
	verifier text := coalesce(nullif(current_setting('mesh.verifier_role', true), ''), 'mesh_verifier');
	role text;
BEGIN
	FOREACH role IN ARRAY ARRAY[broker, verifier] LOOP
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = role) THEN
			BEGIN
				EXECUTE format('CREATE ROLE %I LOGIN', role);
			EXCEPTION WHEN duplicate_object OR unique_violation THEN
				NULL; -- made meanwhile by the migration of another database of this server
			END;
		END IF;
	END LOOP;

	-- Nobody but the owner creates objects: not in public, not a schema of their own, not a temp table
	-- (a temp table is searched before public unless the search_path says otherwise: a shadow).
	REVOKE CREATE ON SCHEMA public FROM PUBLIC;
	EXECUTE format('REVOKE CREATE, TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
	-- Grants older init scripts gave the brokers, for the migrator they no longer run at start.
	EXECUTE format('REVOKE CREATE, TEMPORARY ON DATABASE %I FROM %I, %I', current_database(), broker, verifier);
	IF EXISTS (SELECT FROM pg_namespace WHERE nspname = 'drizzle') THEN
		EXECUTE format('REVOKE CREATE ON SCHEMA drizzle FROM PUBLIC, %I, %I', broker, verifier);
	END IF;
	EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I, %I', current_database(), broker, verifier);
	EXECUTE format('GRANT USAGE ON SCHEMA public TO %I, %I', broker, verifier);

	-- The brokers: rows, never the verifier's memory; the audit chain is read and appended only (the
	-- trigger of 0002 refuses UPDATE, DELETE and TRUNCATE of it to everyone as well).
	EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO %I', broker);
	EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON public.audit_log FROM %I', broker);
	EXECUTE format('REVOKE ALL ON public.audit_verifier_progress FROM %I', broker);
	EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO %I', broker);
	-- Functions are executable by PUBLIC unless revoked: only the brokers call accept_messages.
	REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM PUBLIC;
	EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO %I', broker);

	-- The verifier reads the chain and keeps its progress; it changes nothing else.
	EXECUTE format('GRANT SELECT ON public.audit_log TO %I', verifier);
	EXECUTE format('GRANT SELECT, INSERT, UPDATE ON public.audit_verifier_progress TO %I', verifier);

	-- What later migrations create (run by the same owner): the brokers get rows and functions, PUBLIC no
	-- EXECUTE; a new table the verifier needs is granted by its migration.
	EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO %I', broker);
	EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO %I', broker);
	ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
	EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO %I', broker);

	-- The brokers and the verifier may read the migrator's bookkeeping (a broker refuses to start on a
	-- database whose migrations are behind its release, broker/db/migration-check.ts).
	IF EXISTS (SELECT FROM pg_namespace WHERE nspname = 'drizzle') THEN
		EXECUTE format('GRANT USAGE ON SCHEMA drizzle TO %I, %I', broker, verifier);
		IF to_regclass('drizzle.__drizzle_migrations') IS NOT NULL THEN
			EXECUTE format('GRANT SELECT ON drizzle.__drizzle_migrations TO %I, %I', broker, verifier);
		END IF;
	END IF;
END
$$;
--> statement-breakpoint
-- Functions resolve names on a pinned path, never on the caller's search_path (a table of the caller's
-- schema, or a temp table, named like ours would otherwise be the one read or written). Every function of
-- public: accept_messages (0013) and the audit trigger's (0002). A later migration that replaces one pins it
-- again (tests/integration/db-roles.test.ts checks that every function of public is pinned).
DO $$
DECLARE
	f regprocedure;
BEGIN
	FOR f IN SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f' LOOP
		EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, public, pg_temp', f);
	END LOOP;
END
$$;
