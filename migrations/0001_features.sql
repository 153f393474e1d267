CREATE TABLE "mesh_clocks" (
	"mesh_id" uuid PRIMARY KEY NOT NULL,
	"speed" double precision NOT NULL,
	"paused" boolean DEFAULT false NOT NULL,
	"auto_paused" boolean DEFAULT false NOT NULL,
	"tick" bigint DEFAULT 0 NOT NULL,
	"sim_time_ms" bigint NOT NULL,
	"epoch" bigint DEFAULT 0 NOT NULL,
	"leader_node" text,
	"updated_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "schedules" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"mesh_id" uuid NOT NULL,
	"member_id" bigint NOT NULL,
	"session_id" uuid NOT NULL,
	"target" text NOT NULL,
	"body" text NOT NULL,
	"fire_at" timestamp (3) with time zone,
	"cron" text,
	"tz" text,
	"next_fire_at" timestamp (3) with time zone,
	"occurrences" integer DEFAULT 0 NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"cancelled_at" timestamp (3) with time zone,
	"finished_at" timestamp (3) with time zone
);
--> statement-breakpoint
CREATE TABLE "watches" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"mesh_id" uuid NOT NULL,
	"member_id" bigint NOT NULL,
	"session_id" uuid NOT NULL,
	"url" text NOT NULL,
	"mode" text NOT NULL,
	"extract" text,
	"interval_sec" integer NOT NULL,
	"notify_on" text DEFAULT 'change' NOT NULL,
	"last_value" text,
	"last_checked_at" timestamp (3) with time zone,
	"last_error" text,
	"owner_node" text,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"deleted_at" timestamp (3) with time zone
);
--> statement-breakpoint
ALTER TABLE "messages" ADD COLUMN "kind" text DEFAULT 'message' NOT NULL;--> statement-breakpoint
ALTER TABLE "messages" ADD COLUMN "schedule_id" uuid;--> statement-breakpoint
ALTER TABLE "messages" ADD COLUMN "occurrence" integer;--> statement-breakpoint
ALTER TABLE "presence" ADD COLUMN "status" text;--> statement-breakpoint
ALTER TABLE "mesh_clocks" ADD CONSTRAINT "mesh_clocks_mesh_id_meshes_id_fk" FOREIGN KEY ("mesh_id") REFERENCES "public"."meshes"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "schedules" ADD CONSTRAINT "schedules_mesh_id_meshes_id_fk" FOREIGN KEY ("mesh_id") REFERENCES "public"."meshes"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "schedules" ADD CONSTRAINT "schedules_member_id_members_id_fk" FOREIGN KEY ("member_id") REFERENCES "public"."members"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "watches" ADD CONSTRAINT "watches_mesh_id_meshes_id_fk" FOREIGN KEY ("mesh_id") REFERENCES "public"."meshes"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "watches" ADD CONSTRAINT "watches_member_id_members_id_fk" FOREIGN KEY ("member_id") REFERENCES "public"."members"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "schedules_member_idx" ON "schedules" USING btree ("mesh_id","member_id");--> statement-breakpoint
CREATE INDEX "schedules_due_idx" ON "schedules" USING btree ("next_fire_at") WHERE "schedules"."cancelled_at" IS NULL AND "schedules"."finished_at" IS NULL;--> statement-breakpoint
CREATE INDEX "watches_member_idx" ON "watches" USING btree ("mesh_id","member_id") WHERE "watches"."deleted_at" IS NULL;