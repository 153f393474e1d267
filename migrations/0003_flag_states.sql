CREATE TABLE "flag_states" (
	"environment" text NOT NULL,
	"flag" text NOT NULL,
	"value" boolean NOT NULL,
	"changed_by" text NOT NULL,
	"changed_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "flag_states_pk" PRIMARY KEY("environment","flag")
);
