CREATE TABLE "promotion_pauses" (
	"environment" text PRIMARY KEY NOT NULL,
	"from_phase" integer NOT NULL,
	"to_phase" integer NOT NULL,
	"stage" text NOT NULL,
	"metric" text NOT NULL,
	"reason" text NOT NULL,
	"previous_flags" jsonb NOT NULL,
	"analysis_files" jsonb NOT NULL,
	"actor" text NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
