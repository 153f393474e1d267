import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';

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

  readonly helloRejections = new Counter({
    name: 'mesh_broker_hello_rejections_total',
    help: 'Hellos refused, by reason',
    labelNames: ['reason'],
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

  readonly deliveries = new Counter({
    name: 'mesh_broker_deliveries_total',
    help: 'Message frames written to sessions, by path (local: live on this node; backlog: replay on connect)',
    labelNames: ['path'],
    registers: [this.registry],
  });

  readonly acks = new Counter({
    name: 'mesh_broker_acks_total',
    help: 'Acks received from recipients',
    registers: [this.registry],
  });

  readonly rateLimited = new Counter({
    name: 'mesh_broker_rate_limited_total',
    help: 'Requests refused by a rate limit, by kind (send, hook)',
    labelNames: ['kind'],
    registers: [this.registry],
  });

  readonly streamPublishes = new Counter({
    name: 'mesh_broker_stream_publishes_total',
    help: 'stream.publish frames accepted',
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

  readonly auditAppendFailures = new Counter({
    name: 'mesh_broker_audit_append_failures_total',
    help: 'Audit entries dropped after retries',
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

  readonly redisFallbacks = new Counter({
    name: 'mesh_broker_redis_fallback_total',
    help: 'Calls a shared implementation served locally because Redis was unavailable, by row',
    labelNames: ['row'],
    registers: [this.registry],
  });

  readonly busPublishFailures = new Counter({
    name: 'mesh_broker_bus_publish_failures_total',
    help: 'Bus messages this node could not publish (Redis unreachable); the sweeps cover what they carried',
    registers: [this.registry],
  });

  readonly activeLease = new Gauge({
    name: 'mesh_broker_active_lease_held',
    help: '1 while this node holds the cluster active lease (ha.active-lease) and runs the background work',
    registers: [this.registry],
  });

  readonly dbUp = new Gauge({
    name: 'mesh_broker_db_up',
    help: '1 when the last health check reached Postgres',
    registers: [this.registry],
  });

  readonly redisUp = new Gauge({
    name: 'mesh_broker_redis_up',
    help: '1 when the node is connected to Redis',
    registers: [this.registry],
  });

  constructor(nodeId: string) {
    this.registry.setDefaultLabels({ node: nodeId });
    collectDefaultMetrics({ register: this.registry, prefix: 'mesh_broker_process_' });
  }
}
