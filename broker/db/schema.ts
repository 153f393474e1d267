/**
 * The relational schema: the single source of truth for every table. drizzle-kit generates the SQL
 * migrations in migrations/ from this file; nothing else issues DDL.
 *
 * Hot queries and the index that serves each (keep this list true when a query changes):
 * - hello: member by (mesh, pubkey)                   → members_mesh_pubkey_uq
 * - hello: who owns a session id                      → session_bindings primary key
 * - hello: a member's least recently used session ids → session_bindings_member_idx
 * - drain / reaper: presence rows of one node         → presence_node_idx
 * - peers.list / mesh-wide events: presence of a mesh → presence_mesh_idx
 * - send retry: message by (mesh, sender, client id)  → messages_sender_client_uq
 * - a session's feed: a member's owed rows by seq      → deliveries_pk (member, seq)
 * - ack: a member's row of a message                 → deliveries_message_member_uq
 * - accept: lock a member's sequence                 → delivery_feeds primary key
 * - retention: messages by age                       → messages_created_idx
 * - accept: the nodes holding a recipient's sessions → presence_member_idx
 * - audit append / query: a mesh's chain by seq       → audit_mesh_seq_idx
 * - schedule.list / limits: a member's schedules      → schedules_member_idx
 * - boot re-arm / due sweep: active schedules by time → schedules_due_idx (partial)
 * - watch.list / limits: a member's live watches      → watches_member_idx (partial)
 * - stream.list: a mesh's subscriptions by stream     → stream_subscriptions_pk (mesh first)
 * - session attach / end: a session's subscriptions   → stream_subscriptions_session_idx
 * - mcp.call / mcp.list: a mesh's servers             → mcp_servers_pk
 * - host socket closed / session end: its servers     → mcp_servers_session_idx
 * - flag change: an environment's flag                → flag_states_pk
 */
import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
  doublePrecision,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';

const createdAt = () => timestamp('created_at', { withTimezone: true, precision: 3 }).notNull().defaultNow();

export const meshes = pgTable('meshes', {
  id: uuid('id').primaryKey().defaultRandom(),
  name: text('name').notNull().unique('meshes_name_uq'),
  createdAt: createdAt(),
  /**
   * The region whose nodes take the mesh's clock, schedule firing and watch polling while one of them is
   * alive (`ha.regions`, docs/multi-region.md); null: the primary's region (PRIMARY_REGION).
   */
  homeRegion: text('home_region'),
});

export const members = pgTable(
  'members',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    meshId: uuid('mesh_id')
      .notNull()
      .references(() => meshes.id, { onDelete: 'cascade' }),
    /** Raw 32-byte ed25519 public key, lowercase hex. */
    pubkey: text('pubkey').notNull(),
    name: text('name'),
    /** Groups the member declared in its latest hello; `@group` sends resolve against them. */
    groups: text('groups').array().notNull().default(sql`'{}'::text[]`),
    createdAt: createdAt(),
    revokedAt: timestamp('revoked_at', { withTimezone: true, precision: 3 }),
  },
  (t) => [
    uniqueIndex('members_mesh_pubkey_uq').on(t.meshId, t.pubkey),
    // Each node's re-read of revocations (broker/identity/revocation-watch.ts): the few revoked rows,
    // in the order it pages them.
    index('members_revoked_at_idx').on(t.revokedAt, t.id).where(sql`${t.revokedAt} IS NOT NULL`),
  ],
);

export const nodes = pgTable('nodes', {
  id: text('id').primaryKey(),
  url: text('url'),
  startedAt: timestamp('started_at', { withTimezone: true, precision: 3 }).notNull().defaultNow(),
  heartbeatAt: timestamp('heartbeat_at', { withTimezone: true, precision: 3 }).notNull().defaultNow(),
  stoppedAt: timestamp('stopped_at', { withTimezone: true, precision: 3 }),
  /** What the node reports about itself on each heartbeat (flag values acted on, version, …). */
  info: jsonb('info').notNull().default(sql`'{}'::jsonb`),
  /** The node's REGION (null: single region), written on each heartbeat (docs/multi-region.md). */
  region: text('region'),
});

export const presence = pgTable(
  'presence',
  {
    sessionId: uuid('session_id').primaryKey(),
    meshId: uuid('mesh_id')
      .notNull()
      .references(() => meshes.id, { onDelete: 'cascade' }),
    memberId: bigint('member_id', { mode: 'number' })
      .notNull()
      .references(() => members.id, { onDelete: 'cascade' }),
    nodeId: text('node_id').notNull(),
    name: text('name'),
    groups: text('groups').array().notNull().default(sql`'{}'::text[]`),
    /** Last status reported through POST /hook/status (e.g. "working", "idle"). */
    status: text('status'),
    connectedAt: timestamp('connected_at', { withTimezone: true, precision: 3 }).notNull().defaultNow(),
    /** Set when the socket closed; the row is removed when the grace period ends without a reconnect. */
    disconnectedAt: timestamp('disconnected_at', { withTimezone: true, precision: 3 }),
  },
  (t) => [
    index('presence_node_idx').on(t.nodeId),
    index('presence_mesh_idx').on(t.meshId),
    index('presence_member_idx').on(t.memberId),
  ],
);

/**
 * Which member a session id belongs to (docs/presence.md § Session ids): written at the first accepted
 * hello of the session, refreshed at every later one, and outliving the presence row by far, so that no
 * other member can say hello with the id once the session's grace period is over. Bounded per member
 * (broker/presence/session-bindings.ts): past the bound, the member's least recently used ids go.
 */
export const sessionBindings = pgTable(
  'session_bindings',
  {
    sessionId: uuid('session_id').primaryKey(),
    memberId: bigint('member_id', { mode: 'number' })
      .notNull()
      .references(() => members.id, { onDelete: 'cascade' }),
    boundAt: timestamp('bound_at', { withTimezone: true, precision: 3 }).notNull().defaultNow(),
    lastHelloAt: timestamp('last_hello_at', { withTimezone: true, precision: 3 }).notNull().defaultNow(),
  },
  (t) => [index('session_bindings_member_idx').on(t.memberId, t.lastHelloAt)],
);

export const messages = pgTable(
  'messages',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    /**
     * 64 random bits (16 lowercase hex), the second half of the messageId `<id>-<tag>`: a restore or a
     * promotion that sets the id sequence back hands out an id again, never the same id and tag
     * (docs/protocol.md § Message identity; migration 0014). md5 spreads gen_random_uuid()'s 122 random
     * bits over all 64 (its own first 16 hex digits hold a fixed version digit).
     */
    tag: text('tag').notNull().default(sql`substr(md5(gen_random_uuid()::text), 1, 16)`),
    meshId: uuid('mesh_id')
      .notNull()
      .references(() => meshes.id, { onDelete: 'cascade' }),
    senderId: bigint('sender_id', { mode: 'number' })
      .notNull()
      .references(() => members.id, { onDelete: 'cascade' }),
    senderSession: uuid('sender_session').notNull(),
    /** The sender's own message id: the idempotency key of a send. */
    clientId: text('client_id').notNull(),
    /** The `to` of the send as written: a pubkey, `*` or `@group`. */
    target: text('target').notNull(),
    body: text('body').notNull(),
    /** `message` for peer sends and schedule occurrences; `watch.triggered` for watch notifications. */
    kind: text('kind').notNull().default('message'),
    scheduleId: uuid('schedule_id'),
    occurrence: integer('occurrence'),
    /** The member ids it was owed to when accepted (a retry's `sent` gets them back after acks). */
    recipients: bigint('recipients', { mode: 'number' }).array().notNull().default(sql`'{}'::bigint[]`),
    createdAt: createdAt(),
  },
  (t) => [
    uniqueIndex('messages_sender_client_uq').on(t.meshId, t.senderId, t.clientId),
    index('messages_created_idx').on(t.createdAt),
  ],
);

/**
 * One row per recipient member that is still owed a message (docs/delivery.md): the ack deletes it. `seq` is
 * the member's own sequence, assigned under the lock of the member's `delivery_feeds` row, so the seqs of a
 * member commit in order and without gaps; a session's feed reads them in that order.
 */
export const deliveries = pgTable(
  'deliveries',
  {
    messageId: bigint('message_id', { mode: 'number' })
      .notNull()
      .references(() => messages.id, { onDelete: 'cascade' }),
    memberId: bigint('member_id', { mode: 'number' })
      .notNull()
      .references(() => members.id, { onDelete: 'cascade' }),
    seq: bigint('seq', { mode: 'number' }).notNull(),
  },
  (t) => [
    primaryKey({ name: 'deliveries_pk', columns: [t.memberId, t.seq] }),
    uniqueIndex('deliveries_message_member_uq').on(t.messageId, t.memberId),
  ],
);

/**
 * A member's delivery sequence: `last_seq` is the seq of its latest delivery row. Locked by every
 * transaction that writes the member's delivery rows (an accept batch), so seqs commit in order.
 */
export const deliveryFeeds = pgTable('delivery_feeds', {
  memberId: bigint('member_id', { mode: 'number' })
    .primaryKey()
    .references(() => members.id, { onDelete: 'cascade' }),
  lastSeq: bigint('last_seq', { mode: 'number' }).notNull().default(0),
});

/**
 * The audit hash chain, one per mesh. No uniqueness on (mesh, seq) on purpose: the local (per-node
 * cached head) mode can fork the chain, and the verifier must be able to see that fork.
 */
export const auditLog = pgTable(
  'audit_log',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    meshId: uuid('mesh_id').notNull(),
    seq: bigint('seq', { mode: 'number' }).notNull(),
    prevHash: text('prev_hash').notNull(),
    hash: text('hash').notNull(),
    eventType: text('event_type').notNull(),
    actor: text('actor'),
    payload: jsonb('payload').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, precision: 3 }).notNull(),
  },
  (t) => [index('audit_mesh_seq_idx').on(t.meshId, t.seq)],
);

/** A mesh's simulated clock. Written by whichever node runs it, so a later runner continues from here. */
export const meshClocks = pgTable('mesh_clocks', {
  meshId: uuid('mesh_id')
    .primaryKey()
    .references(() => meshes.id, { onDelete: 'cascade' }),
  /** Simulated minutes per real minute (1…100). */
  speed: doublePrecision('speed').notNull(),
  paused: boolean('paused').notNull().default(false),
  /** Paused by the broker because the mesh had no sessions; resumes when one connects. */
  autoPaused: boolean('auto_paused').notNull().default(false),
  tick: bigint('tick', { mode: 'number' }).notNull().default(0),
  /** Simulated time, ms since the epoch. */
  simTimeMs: bigint('sim_time_ms', { mode: 'number' }).notNull(),
  /** Leadership term the last write was made under (fencing, with the shared implementation). */
  epoch: bigint('epoch', { mode: 'number' }).notNull().default(0),
  leaderNode: text('leader_node'),
  updatedAt: timestamp('updated_at', { withTimezone: true, precision: 3 }).notNull().defaultNow(),
});

/** Scheduled messages: one-shot (`fire_at`) or recurring (`cron` in `tz`). */
export const schedules = pgTable(
  'schedules',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    meshId: uuid('mesh_id')
      .notNull()
      .references(() => meshes.id, { onDelete: 'cascade' }),
    memberId: bigint('member_id', { mode: 'number' })
      .notNull()
      .references(() => members.id, { onDelete: 'cascade' }),
    sessionId: uuid('session_id').notNull(),
    target: text('target').notNull(),
    body: text('body').notNull(),
    fireAt: timestamp('fire_at', { withTimezone: true, precision: 3 }),
    cron: text('cron'),
    tz: text('tz'),
    nextFireAt: timestamp('next_fire_at', { withTimezone: true, precision: 3 }),
    /** Occurrences fired so far; the next one is number `occurrences + 1`. */
    occurrences: integer('occurrences').notNull().default(0),
    createdAt: createdAt(),
    cancelledAt: timestamp('cancelled_at', { withTimezone: true, precision: 3 }),
    finishedAt: timestamp('finished_at', { withTimezone: true, precision: 3 }),
  },
  (t) => [
    index('schedules_member_idx').on(t.meshId, t.memberId),
    index('schedules_due_idx')
      .on(t.nextFireAt)
      .where(sql`${t.cancelledAt} IS NULL AND ${t.finishedAt} IS NULL`),
  ],
);

/** URL watches: polled every `interval_sec`; a change (per `notify_on`) is a durable notification. */
export const watches = pgTable(
  'watches',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    meshId: uuid('mesh_id')
      .notNull()
      .references(() => meshes.id, { onDelete: 'cascade' }),
    memberId: bigint('member_id', { mode: 'number' })
      .notNull()
      .references(() => members.id, { onDelete: 'cascade' }),
    sessionId: uuid('session_id').notNull(),
    url: text('url').notNull(),
    mode: text('mode').notNull(),
    extract: text('extract'),
    intervalSec: integer('interval_sec').notNull(),
    notifyOn: text('notify_on').notNull().default('change'),
    lastValue: text('last_value'),
    lastCheckedAt: timestamp('last_checked_at', { withTimezone: true, precision: 3 }),
    lastError: text('last_error'),
    /**
     * How many notifications of the watch are committed (migration 0016, docs/watches.md § One notification
     * per change): the next one is message `watch:<id>:<notified + 1>`, committed with this count raised in
     * one transaction, and every poll's write is conditional on the count (and last poll) it read.
     */
    notified: integer('notified').notNull().default(0),
    /** The node polling the watch. */
    ownerNode: text('owner_node'),
    /** Shared watches: the owner's lease; past it, any node may adopt the watch. */
    leaseUntil: timestamp('lease_until', { withTimezone: true, precision: 3 }),
    createdAt: createdAt(),
    deletedAt: timestamp('deleted_at', { withTimezone: true, precision: 3 }),
  },
  (t) => [index('watches_member_idx').on(t.meshId, t.memberId).where(sql`${t.deletedAt} IS NULL`)],
);

/**
 * The last recorded value of each flag per environment. Recording a change updates the row only when the
 * value differs, in the same transaction as its audit event: so a change seen by many nodes (or made by
 * the CLI and then seen by nodes) is audited once.
 */
export const flagStates = pgTable(
  'flag_states',
  {
    environment: text('environment').notNull(),
    flag: text('flag').notNull(),
    value: boolean('value').notNull(),
    changedBy: text('changed_by').notNull(),
    changedAt: timestamp('changed_at', { withTimezone: true, precision: 3 }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ name: 'flag_states_pk', columns: [t.environment, t.flag] })],
);

/** Stream subscriptions of sessions, for cluster-wide `stream.list` and for a session that moves nodes. */
export const streamSubscriptions = pgTable(
  'stream_subscriptions',
  {
    meshId: uuid('mesh_id')
      .notNull()
      .references(() => meshes.id, { onDelete: 'cascade' }),
    stream: text('stream').notNull(),
    sessionId: uuid('session_id').notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ name: 'stream_subscriptions_pk', columns: [t.meshId, t.stream, t.sessionId] }),
    index('stream_subscriptions_session_idx').on(t.sessionId),
  ],
);

/** MCP servers hosted by peers, with the node that holds the host's socket (calls are routed there). */
export const mcpServers = pgTable(
  'mcp_servers',
  {
    meshId: uuid('mesh_id')
      .notNull()
      .references(() => meshes.id, { onDelete: 'cascade' }),
    server: text('server').notNull(),
    description: text('description').notNull(),
    tools: jsonb('tools').notNull(),
    hostPubkey: text('host_pubkey').notNull(),
    hostSession: uuid('host_session').notNull(),
    hostNode: text('host_node').notNull(),
    online: boolean('online').notNull().default(true),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ name: 'mcp_servers_pk', columns: [t.meshId, t.server] }),
    index('mcp_servers_session_idx').on(t.hostSession),
  ],
);

/**
 * One row per fired occurrence of a schedule. The primary key is the exactly-once guarantee of the shared
 * scheduler: the occurrence, its message and the schedule's progress commit together or not at all.
 */
export const scheduleOccurrences = pgTable(
  'schedule_occurrences',
  {
    scheduleId: uuid('schedule_id')
      .notNull()
      .references(() => schedules.id, { onDelete: 'cascade' }),
    occurrence: integer('occurrence').notNull(),
    nodeId: text('node_id').notNull(),
    /** The occurrence's message row (`messages.id`; not the peer's messageId, which adds the row's tag). */
    messageId: bigint('message_id', { mode: 'number' }),
    firedAt: timestamp('fired_at', { withTimezone: true, precision: 3 }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ name: 'schedule_occurrences_pk', columns: [t.scheduleId, t.occurrence] })],
);

/** Cluster-wide leases, such as the active lease of phase 1 (the node allowed to run background work). */
export const clusterLeases = pgTable('cluster_leases', {
  name: text('name').primaryKey(),
  holder: text('holder').notNull(),
  /** Bumped on every change of holder: a term number. */
  epoch: bigint('epoch', { mode: 'number' }).notNull().default(1),
  expiresAt: timestamp('expires_at', { withTimezone: true, precision: 3 }).notNull(),
});

/** Every smoke run `workbench promote` made (and what it found), per environment and phase. */
export const smokeRuns = pgTable(
  'smoke_runs',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    environment: text('environment').notNull(),
    phase: integer('phase').notNull(),
    passed: boolean('passed').notNull(),
    results: jsonb('results').notNull(),
    createdAt: createdAt(),
  },
  (t) => [index('smoke_runs_env_phase_idx').on(t.environment, t.phase)],
);

/** Promotions and rollbacks of environments between phases. */
export const promotions = pgTable(
  'promotions',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    environment: text('environment').notNull(),
    fromPhase: integer('from_phase').notNull(),
    toPhase: integer('to_phase').notNull(),
    /** promoted, blocked (nothing changed), rolled-back (flipped, failed, flipped back) or rollback. */
    status: text('status').notNull(),
    failedCheck: text('failed_check'),
    actor: text('actor').notNull(),
    createdAt: createdAt(),
  },
  (t) => [index('promotions_env_idx').on(t.environment, t.id)],
);

/**
 * A promotion paused by an inconclusive analysis (docs/promotion.md § Analysis), one row per environment at
 * most: where it stopped (`stage`: baseline, before the flip; bake, after it), why, and the flags to put
 * back on `--abort`. `promote --resume` or `--abort` (each under the promotion lock) deletes it; while it is
 * there, any other promotion or rollback of the environment is blocked.
 */
export const promotionPauses = pgTable('promotion_pauses', {
  environment: text('environment').primaryKey(),
  fromPhase: integer('from_phase').notNull(),
  toPhase: integer('to_phase').notNull(),
  /** baseline (nothing changed yet) or bake (the flags are the target's). */
  stage: text('stage').notNull(),
  metric: text('metric').notNull(),
  reason: text('reason').notNull(),
  /** The flags before the flip (what --abort puts back after a bake pause). */
  previousFlags: jsonb('previous_flags').notNull(),
  /** The analysis files the promotion runs (`{baseline, bake}` paths), read again by --resume. */
  analysisFiles: jsonb('analysis_files').notNull(),
  actor: text('actor').notNull(),
  createdAt: createdAt(),
});

/**
 * How far the independent audit verifier (`workbench audit verify --follow`) got in each mesh's chain:
 * the level it verified up to and the hash of that head row, plus what it found on the way. A verifier
 * that restarts continues from here (and notices a head that was rewritten since). Written only by the
 * verifier, never by a broker.
 */
export const auditVerifierProgress = pgTable('audit_verifier_progress', {
  meshId: uuid('mesh_id').primaryKey(),
  verifiedSeq: bigint('verified_seq', { mode: 'number' }).notNull(),
  verifiedHash: text('verified_hash').notNull(),
  breaks: integer('breaks').notNull().default(0),
  forks: integer('forks').notNull().default(0),
  updatedAt: timestamp('updated_at', { withTimezone: true, precision: 3 }).notNull().defaultNow(),
});
