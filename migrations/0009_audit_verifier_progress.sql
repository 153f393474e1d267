CREATE TABLE "audit_verifier_progress" (
	"mesh_id" uuid PRIMARY KEY NOT NULL,
	"verified_seq" bigint NOT NULL,
	"verified_hash" text NOT NULL,
	"breaks" integer DEFAULT 0 NOT NULL,
	"forks" integer DEFAULT 0 NOT NULL,
	"updated_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
