import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { type BuildInfo, buildInfo } from './build-info.js';
import { REJECT_REASONS } from './bus/bus.js';

/**
 * The node's Prometheus metrics. Every series carries `node` (a default label), so a cluster's metrics
 * can be summed or split by node. Names follow Prometheus conventions: `mesh_broker_` prefix, `_total`
 * for counters, base units.
 */
export class BrokerMetrics {
  readonly registry = new Registry();

  readonly connections = new Gauge({
    name: 'mesh_broker_connections',
    help: 'WebSocket sessions held by this node, per mesh',
    labelNames: ['mesh'],
    registers: [this.registry],
  });

  readonly hellosAccepted = new Counter({
    name: 'mesh_broker_hellos_accepted_total',
    help: 'Hellos welcomed on this node, by whether the session resumed (resumed="true" is a reconnect)',
    labelNames: ['resumed'],
    registers: [this.registry],
  });

  readonly helloRejections = new Counter({
    name: 'mesh_broker_hello_rejections_total',
    help: 'Hellos refused, by reason',
    labelNames: ['reason'],
    registers: [this.registry],
  });

  readonly inboundPauses = new Counter({
    name: 'mesh_broker_inbound_pauses_total',
    help: 'Times a socket stopped being read because its queue of frames was full (a sender faster than the node, or paced by FRAME_RATE_PER_SEC)',
    labelNames: ['reason'],
    registers: [this.registry],
  });

  readonly unexpectedErrors = new Counter({
    name: 'mesh_broker_unexpected_errors_total',
    help: 'Errors nothing handled (kind: unhandled_rejection, the node keeps serving; uncaught_exception, the node exits for its supervisor to restart it)',
    labelNames: ['kind'],
    registers: [this.registry],
  });

  readonly frameErrors = new Counter({
    name: 'mesh_broker_frame_errors_total',
    help: 'Error frames sent in reply to bad or refused requests, by code',
    labelNames: ['code'],
    registers: [this.registry],
  });

  readonly messagesAccepted = new Counter({
    name: 'mesh_broker_messages_accepted_total',
    help: 'Durable messages accepted (a `sent` reply), excluding idempotent retries',
    registers: [this.registry],
  });

  readonly dbRoundTrips = new Counter({
    name: 'mesh_broker_db_round_trips_total',
    help: 'Postgres round trips of this node, by operation (hello: admitting a hello and taking its presence over; session: the work of the rows at the start of a session; backlog: the first feed read of a new socket; other: everything else) and kind (statement, begin, commit, rollback)',
    labelNames: ['operation', 'kind'],
    registers: [this.registry],
  });

  readonly deliveries = new Counter({
    name: 'mesh_broker_deliveries_total',
    help: 'Durable frames written to sessions by their feeds, by path (local: a hint of this node, remote: a hint over the bus once Postgres showed its row, backlog: a read from Postgres)',
    labelNames: ['path'],
    registers: [this.registry],
  });

  /**
   * From a publish accepted on one node to its delivery by another node (the bus payload carries the
   * origin's `publishedAt`), by kind (message, stream). Cross-node clocks are assumed to be in sync
   * (NTP); a negative difference is recorded as 0.
   */
  readonly fanoutLatency = new Histogram({
    name: 'mesh_broker_fanout_latency_seconds',
    help: 'Time from a publish accepted on another node to its delivery to sessions here, by kind',
    labelNames: ['kind'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });

  readonly acks = new Counter({
    name: 'mesh_broker_acks_total',
    help: 'Acks received from recipients',
    registers: [this.registry],
  });

  readonly rateLimited = new Counter({
    name: 'mesh_broker_rate_limited_total',
    help: 'Requests refused by a rate limit, by kind (send, hook; schedule: an occurrence skipped, watch: a notification held back, both from the send bucket)',
    labelNames: ['kind'],
    registers: [this.registry],
  });

  readonly streamPublishes = new Counter({
    name: 'mesh_broker_stream_publishes_total',
    help: 'stream.publish frames accepted',
    registers: [this.registry],
  });

  readonly streamGaps = new Counter({
    name: 'mesh_broker_stream_gaps_total',
    help: 'Gaps a node found in a stream it delivers (a skipped offset, or a top ahead of what it delivered), by outcome: recovered from the history, or reported to the subscribers as stream.gap',
    labelNames: ['outcome'],
    registers: [this.registry],
  });

  readonly clockTicks = new Counter({
    name: 'mesh_broker_clock_ticks_total',
    help: 'Mesh clock ticks produced by this node',
    registers: [this.registry],
  });

  readonly clockFenced = new Counter({
    name: 'mesh_broker_clock_fenced_total',
    help: 'Clock ticks refused because another node leads under a newer epoch (this node stepped down)',
    registers: [this.registry],
  });

  readonly scheduleFires = new Counter({
    name: 'mesh_broker_schedule_fires_total',
    help: 'Schedule occurrences this node turned into messages, by outcome',
    labelNames: ['outcome'],
    registers: [this.registry],
  });

  readonly watchNotifications = new Counter({
    name: 'mesh_broker_watch_notifications_total',
    help: 'watch.triggered notifications this node stored',
    registers: [this.registry],
  });

  readonly auditAppends = new Counter({
    name: 'mesh_broker_audit_appends_total',
    help: 'Audit chain rows appended by this node, by mode (local: cached head)',
    labelNames: ['mode'],
    registers: [this.registry],
  });

  readonly mcpCalls = new Counter({
    name: 'mesh_broker_mcp_calls_total',
    help: 'MCP calls made through this node, by how they ended for the caller (result, error, timeout)',
    labelNames: ['outcome'],
    registers: [this.registry],
  });

  readonly backlogRefused = new Counter({
    name: 'mesh_broker_backlog_refused_total',
    help: 'Deliveries not stored because the recipient member owed BACKLOG_MAX messages: a DM refused (limit_exceeded), a broadcast or group recipient skipped',
    labelNames: ['kind'],
    registers: [this.registry],
  });

  readonly retentionDeleted = new Counter({
    name: 'mesh_broker_retention_deleted_total',
    help: 'Rows removed by retention: messages nobody is owed any more past MESSAGE_RETENTION_MS, deliveries expired past BACKLOG_MAX_AGE_MS',
    labelNames: ['what'],
    registers: [this.registry],
  });

  readonly busWakeups = new Counter({
    name: 'mesh_broker_bus_wakeups_total',
    help: 'Delivery wake-ups published, by channel (node: to a node holding a recipient session; mesh: a broadcast)',
    labelNames: ['channel'],
    registers: [this.registry],
  });

  readonly commitBatch = new Histogram({
    name: 'mesh_broker_commit_batch_size',
    help: 'Requests written per transaction by group commit, by kind (accept, ack)',
    labelNames: ['kind'],
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
    registers: [this.registry],
  });

  readonly capAdmissions = new Counter({
    name: 'mesh_broker_connection_cap_admissions_total',
    help: 'Accepted hellos asked of the per-mesh connection cap, by outcome (admitted, refused)',
    labelNames: ['outcome'],
    registers: [this.registry],
  });

  readonly rowSwitches = new Counter({
    name: 'mesh_broker_row_switches_total',
    help: 'Moves of a state row between its implementations, by flag and outcome (done, failed: undone)',
    labelNames: ['flag', 'outcome'],
    registers: [this.registry],
  });

  readonly auditAppendFailures = new Counter({
    name: 'mesh_broker_audit_append_failures_total',
    help: 'Audit entries dropped after retries',
    registers: [this.registry],
  });

  readonly shadowComparisons = new Counter({
    name: 'mesh_broker_shadow_comparisons_total',
    help: 'Shadow mode: calls the local implementation answered, compared with what the shared one would answer, by flag and outcome (agree, disagree, error)',
    labelNames: ['flag', 'outcome'],
    registers: [this.registry],
  });

  readonly shadowActive = new Gauge({
    name: 'mesh_broker_shadow_active',
    help: "Shadow mode: 1 while this node compares the flag's row with its shared implementation",
    labelNames: ['flag'],
    registers: [this.registry],
  });

  readonly flagEnabled = new Gauge({
    name: 'mesh_broker_flag_enabled',
    help: 'Flag values this node acts on: 1 when the row runs its shared implementation',
    labelNames: ['flag'],
    registers: [this.registry],
  });

  readonly flagConfigError = new Gauge({
    name: 'mesh_broker_flag_config_error',
    help: '1 while the flag provider cannot be read (the node keeps its last good values)',
    registers: [this.registry],
  });

  readonly flagProviderStatus = new Gauge({
    name: 'mesh_broker_flag_provider_status',
    help: "1 for how the flag provider's latest read went: ok, unauthorized (Unleash refused the token), unreachable or error",
    labelNames: ['status'],
    registers: [this.registry],
  });

  readonly redisFallbacks = new Counter({
    name: 'mesh_broker_redis_fallback_total',
    help: 'Calls a shared implementation served locally because Redis was unavailable, by row',
    labelNames: ['row'],
    registers: [this.registry],
  });

  readonly adminPreviousTokenUses = new Counter({
    name: 'mesh_broker_admin_previous_token_uses_total',
    help: 'Admin API requests authorised by ADMIN_TOKEN_PREVIOUS (a rotation in progress: once this stops growing on every node, nothing sends the old token)',
    registers: [this.registry],
  });

  readonly busPublishFailures = new Counter({
    name: 'mesh_broker_bus_publish_failures_total',
    help: 'Bus messages this node could not publish (Redis unreachable); what they carried is in Postgres and read by the feeds, reapers and polls',
    registers: [this.registry],
  });

  readonly busRejected = new Counter({
    name: 'mesh_broker_bus_rejected_total',
    help: 'Bus envelopes dropped on receipt, by reason (unsigned, bad_mac, unknown_version, stale, kind_not_allowed, bad_payload, bad_json): nothing of them reached a socket; anything but 0 means a publisher without BUS_SECRET, or a node with another one',
    labelNames: ['reason'],
    registers: [this.registry],
  });

  readonly busRemotePublishFailures = new Counter({
    name: 'mesh_broker_bus_remote_publish_failures_total',
    help: "Bus messages not published to another region's Redis (REDIS_REMOTE_URLS: unreachable, too slow, or too many in flight); the local publish is not held by them",
    labelNames: ['remote'],
    registers: [this.registry],
  });

  readonly regionReads = new Counter({
    name: 'mesh_broker_region_reads_total',
    help: 'Lag-tolerant list reads (peers.list, stream.list, mcp.list, schedule.list, watch.list, audit.query), by the pool that served them (replica: DATABASE_READ_URL, with ha.regions on)',
    labelNames: ['pool'],
    registers: [this.registry],
  });

  // Ownership gauges read the modules at scrape time, so they cannot drift from what the node does.
  private clocksLedNow: () => number = () => 0;
  private watchesOwnedNow: () => number = () => 0;

  readonly clocksLed: Gauge = new Gauge({
    name: 'mesh_broker_clocks_led',
    help: 'Mesh clocks this node ticks (with ha.clock: meshes whose clock lock it holds)',
    registers: [this.registry],
    collect: (): void => this.clocksLed.set(this.clocksLedNow()),
  });

  readonly watchesOwned: Gauge = new Gauge({
    name: 'mesh_broker_watches_owned',
    help: 'URL watches this node polls (with ha.watches: watches whose lease it holds)',
    registers: [this.registry],
    collect: (): void => this.watchesOwned.set(this.watchesOwnedNow()),
  });

  readonly activeLease = new Gauge({
    name: 'mesh_broker_active_lease_held',
    help: '1 while this node holds the cluster active lease (ha.active-lease) and runs the background work',
    registers: [this.registry],
  });

  // Counted where the lease module changes its answer, so a flip shorter than a scrape is still seen
  // (the gauge above only shows the state at scrape time): what the lease-flapping alert reads.
  readonly activeLeaseTransitions = new Counter({
    name: 'mesh_broker_active_lease_transitions_total',
    help: "Changes of this node's hold on the cluster active lease, by what it became (holder: claimed; standby: given up, taken by another node, or not renewed in time)",
    labelNames: ['to'],
    registers: [this.registry],
  });

  readonly dbUp = new Gauge({
    name: 'mesh_broker_db_up',
    help: '1 when the last health check reached Postgres',
    registers: [this.registry],
  });

  /**
   * 1 for the fence's last verdict on the server behind DATABASE_URL, 0 for the others
   * (broker/db/primary-fence.ts): anything but `primary` means writes answer `unavailable`.
   */
  readonly dbPrimary = new Gauge({
    name: 'mesh_broker_db_primary',
    help: "The last primary-of-record check of DATABASE_URL's server (1 for its state: primary, in_recovery, read_only, old_timeline, unknown)",
    labelNames: ['state'],
    registers: [this.registry],
  });

  readonly dbTimeline = new Gauge({
    name: 'mesh_broker_db_timeline',
    help: 'The newest Postgres timeline a primary showed this node (a promotion starts a new one)',
    registers: [this.registry],
  });

  /**
   * Health checks answered, by route (`health`, `active`) and answer (`ok`, `starting`, `draining`, `unavailable`,
   * `standby`): a load balancer's checks made visible, so an operator (and a test) sees that the balancer
   * has looked at a node since it started, and what it was told.
   */
  readonly healthChecks = new Counter({
    name: 'mesh_broker_health_checks_total',
    help: 'Health checks answered, by route and answer',
    labelNames: ['route', 'status'] as const,
    registers: [this.registry],
  });

  readonly redisUp = new Gauge({
    name: 'mesh_broker_redis_up',
    help: '1 when the node is connected to Redis',
    registers: [this.registry],
  });

  /** Always 1; its labels say which code the node runs (./build-info.ts). */
  readonly buildInfo = new Gauge({
    name: 'mesh_broker_build_info',
    help: 'Always 1: the version (package.json) and commit (MESH_BUILD_COMMIT or the BUILD_COMMIT stamp, else unknown) this node runs',
    labelNames: ['version', 'commit'],
    registers: [this.registry],
  });

  constructor(nodeId: string, build: BuildInfo = buildInfo()) {
    this.registry.setDefaultLabels({ node: nodeId });
    this.buildInfo.set({ version: build.version, commit: build.commit }, 1);
    collectDefaultMetrics({ register: this.registry, prefix: 'mesh_broker_process_' });
    // Known label values start at 0, so a rate or a dashboard query has a series before the first event.
    for (const kind of ['send', 'hook', 'schedule', 'watch']) this.rateLimited.inc({ kind }, 0);
    this.helloRejections.inc({ reason: 'mesh at capacity' }, 0);
    for (const resumed of ['true', 'false']) this.hellosAccepted.inc({ resumed }, 0);
    for (const outcome of ['fired', 'skipped', 'failed']) this.scheduleFires.inc({ outcome }, 0);
    for (const row of ['rate-limits', 'nonces', 'connection-cap']) this.redisFallbacks.inc({ row }, 0);
    for (const outcome of ['result', 'error', 'timeout']) this.mcpCalls.inc({ outcome }, 0);
    for (const outcome of ['recovered', 'reported']) this.streamGaps.inc({ outcome }, 0);
    for (const outcome of ['admitted', 'refused']) this.capAdmissions.inc({ outcome }, 0);
    for (const kind of ['dm', 'broadcast']) this.backlogRefused.inc({ kind }, 0);
    for (const what of ['messages', 'expired']) this.retentionDeleted.inc({ what }, 0);
    for (const channel of ['node', 'mesh']) this.busWakeups.inc({ channel }, 0);
    for (const reason of REJECT_REASONS) this.busRejected.inc({ reason }, 0);
    for (const to of ['holder', 'standby']) this.activeLeaseTransitions.inc({ to }, 0);
    for (const pool of ['primary', 'replica']) this.regionReads.inc({ pool }, 0);
  }

  /**
   * Registers `mesh_broker_replica_lag_seconds`, read at scrape time from the read pool (only where it is a
   * replica: absent on a node whose reads go to the primary). A failed read shows no value, not an old one.
   */
  replicaLagFrom(read: () => Promise<number | undefined>): void {
    const gauge: Gauge = new Gauge({
      name: 'mesh_broker_replica_lag_seconds',
      help: "How far the read pool's replica is behind the primary (now() - pg_last_xact_replay_timestamp()); 0 while nothing is being replayed",
      registers: [this.registry],
      collect: async (): Promise<void> => {
        const lag = await read().catch(() => undefined);
        if (lag === undefined) gauge.reset();
        else gauge.set(lag);
      },
    });
  }

  /** What `mesh_broker_clocks_led` reads at scrape time (the clock row registers it). */
  clocksLedBy(read: () => number): void {
    this.clocksLedNow = read;
  }

  /** What `mesh_broker_watches_owned` reads at scrape time (the watch row registers it). */
  watchesPolled(read: () => number): void {
    this.watchesOwnedNow = read;
  }
}
