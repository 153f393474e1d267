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
