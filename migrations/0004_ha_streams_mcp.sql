CREATE TABLE "mcp_servers" (
	"mesh_id" uuid NOT NULL,
	"server" text NOT NULL,
	"description" text NOT NULL,
	"tools" jsonb NOT NULL,
	"host_pubkey" text NOT NULL,
	"host_session" uuid NOT NULL,
	"host_node" text NOT NULL,
	"online" boolean DEFAULT true NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "mcp_servers_pk" PRIMARY KEY("mesh_id","server")
);
--> statement-breakpoint
CREATE TABLE "stream_subscriptions" (
	"mesh_id" uuid NOT NULL,
	"stream" text NOT NULL,
	"session_id" uuid NOT NULL,
	"created_at" timestamp (3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "stream_subscriptions_pk" PRIMARY KEY("mesh_id","stream","session_id")
);
--> statement-breakpoint
ALTER TABLE "mcp_servers" ADD CONSTRAINT "mcp_servers_mesh_id_meshes_id_fk" FOREIGN KEY ("mesh_id") REFERENCES "public"."meshes"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "stream_subscriptions" ADD CONSTRAINT "stream_subscriptions_mesh_id_meshes_id_fk" FOREIGN KEY ("mesh_id") REFERENCES "public"."meshes"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "mcp_servers_session_idx" ON "mcp_servers" USING btree ("host_session");--> statement-breakpoint
CREATE INDEX "stream_subscriptions_session_idx" ON "stream_subscriptions" USING btree ("session_id");