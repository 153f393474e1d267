CREATE TABLE "audit_log" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "audit_log_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"mesh_id" uuid NOT NULL,
	"seq" bigint NOT NULL,
	"prev_hash" text NOT NULL,
	"hash" text NOT NULL,
	"event_type" text NOT NULL,
	"actor" text,
	"payload" jsonb NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "deliveries" (
	"message_id" bigint NOT NULL,
	"member_id" bigint NOT NULL,
	"acked_at" timestamp (3) with time zone,
	CONSTRAINT "deliveries_pk" PRIMARY KEY("message_id","member_id")
);
--> statement-breakpoint
CREATE TABLE "members" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "members_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"mesh_id" uuid NOT NULL,
	"pubkey" text NOT NULL,
	"name" text,
	"groups" text[] DEFAULT '{}'::text[] NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp (3) with time zone
);
--> statement-breakpoint
CREATE TABLE "meshes" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"name" text NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "meshes_name_uq" UNIQUE("name")
);
--> statement-breakpoint
CREATE TABLE "messages" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "messages_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"mesh_id" uuid NOT NULL,
	"sender_id" bigint NOT NULL,
	"sender_session" uuid NOT NULL,
	"client_id" text NOT NULL,
	"target" text NOT NULL,
	"body" text NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "nodes" (
	"id" text PRIMARY KEY NOT NULL,
	"url" text,
	"started_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"heartbeat_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"stopped_at" timestamp (3) with time zone,
	"info" jsonb DEFAULT '{}'::jsonb NOT NULL
);
--> statement-breakpoint
CREATE TABLE "presence" (
	"session_id" uuid PRIMARY KEY NOT NULL,
	"mesh_id" uuid NOT NULL,
	"member_id" bigint NOT NULL,
	"node_id" text NOT NULL,
	"name" text,
	"groups" text[] DEFAULT '{}'::text[] NOT NULL,
	"connected_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	"disconnected_at" timestamp (3) with time zone
);
--> statement-breakpoint
ALTER TABLE "deliveries" ADD CONSTRAINT "deliveries_message_id_messages_id_fk" FOREIGN KEY ("message_id") REFERENCES "public"."messages"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "deliveries" ADD CONSTRAINT "deliveries_member_id_members_id_fk" FOREIGN KEY ("member_id") REFERENCES "public"."members"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "members" ADD CONSTRAINT "members_mesh_id_meshes_id_fk" FOREIGN KEY ("mesh_id") REFERENCES "public"."meshes"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "messages" ADD CONSTRAINT "messages_mesh_id_meshes_id_fk" FOREIGN KEY ("mesh_id") REFERENCES "public"."meshes"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "messages" ADD CONSTRAINT "messages_sender_id_members_id_fk" FOREIGN KEY ("sender_id") REFERENCES "public"."members"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "presence" ADD CONSTRAINT "presence_mesh_id_meshes_id_fk" FOREIGN KEY ("mesh_id") REFERENCES "public"."meshes"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "presence" ADD CONSTRAINT "presence_member_id_members_id_fk" FOREIGN KEY ("member_id") REFERENCES "public"."members"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "audit_mesh_seq_idx" ON "audit_log" USING btree ("mesh_id","seq");--> statement-breakpoint
CREATE INDEX "deliveries_pending_idx" ON "deliveries" USING btree ("member_id","message_id") WHERE "deliveries"."acked_at" IS NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "members_mesh_pubkey_uq" ON "members" USING btree ("mesh_id","pubkey");--> statement-breakpoint
CREATE UNIQUE INDEX "messages_sender_client_uq" ON "messages" USING btree ("mesh_id","sender_id","client_id");--> statement-breakpoint
CREATE INDEX "presence_node_idx" ON "presence" USING btree ("node_id");--> statement-breakpoint
CREATE INDEX "presence_mesh_idx" ON "presence" USING btree ("mesh_id");