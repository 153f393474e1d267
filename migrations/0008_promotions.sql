CREATE TABLE "promotions" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "promotions_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"environment" text NOT NULL,
	"from_phase" integer NOT NULL,
	"to_phase" integer NOT NULL,
	"status" text NOT NULL,
	"failed_check" text,
	"actor" text NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "smoke_runs" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "smoke_runs_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"environment" text NOT NULL,
	"phase" integer NOT NULL,
	"passed" boolean NOT NULL,
	"results" jsonb NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "promotions_env_idx" ON "promotions" USING btree ("environment","id");--> statement-breakpoint
CREATE INDEX "smoke_runs_env_phase_idx" ON "smoke_runs" USING btree ("environment","phase");