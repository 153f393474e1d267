CREATE TABLE "schedule_occurrences" (
	"schedule_id" uuid NOT NULL,
	"occurrence" integer NOT NULL,
	"node_id" text NOT NULL,
	"message_id" bigint,
	"fired_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "schedule_occurrences_pk" PRIMARY KEY("schedule_id","occurrence")
);
--> statement-breakpoint
ALTER TABLE "schedule_occurrences" ADD CONSTRAINT "schedule_occurrences_schedule_id_schedules_id_fk" FOREIGN KEY ("schedule_id") REFERENCES "public"."schedules"("id") ON DELETE cascade ON UPDATE no action;