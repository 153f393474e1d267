CREATE TABLE "cluster_leases" (
	"name" text PRIMARY KEY NOT NULL,
	"holder" text NOT NULL,
	"epoch" bigint DEFAULT 1 NOT NULL,
	"expires_at" timestamp (3) with time zone NOT NULL
);
