/**
 * The state rows of DESIGN §2 as this node runs them: one implementation per row. This is the only
 * place that picks implementations; with the flags issue it becomes the switch that chooses local or
 * shared per row at runtime. Modules never read flags and never know each other.
 */
import type { AuditLog } from './audit/audit.js';
import { LocalAuditLog } from './audit/audit.local.js';
import type { MeshClocks } from './clock/clock.js';
import { LocalClocks } from './clock/clock.local.js';
import type { BrokerConfig } from './config.js';
import type { ConnectionRegistry } from './connections/registry.js';
import type { Pool } from './db/pool.js';
import type { Delivery } from './delivery/delivery.js';
import { LocalDelivery } from './delivery/delivery.local.js';
import type { MessageStore } from './delivery/store.js';
import type { NonceGuard } from './hello/nonces.js';
import { LocalNonceGuard } from './hello/nonces.local.js';
import type { ConnectionCap } from './limits/connection-cap.js';
import { LocalConnectionCap } from './limits/connection-cap.local.js';
import { type RateLimits, ratePolicies } from './limits/rate-limits.js';
import { LocalRateLimits } from './limits/rate-limits.local.js';
import type { Logger } from './log.js';
import type { McpRegistry } from './mcp/mcp.js';
import { LocalMcpRegistry } from './mcp/mcp.local.js';
import type { BrokerMetrics } from './metrics.js';
import type { Presence, PresenceEvents } from './presence/presence.js';
import { LocalPresence } from './presence/presence.local.js';
import { fireOccurrence } from './schedules/fire.js';
import type { Scheduler } from './schedules/scheduler.js';
import { LocalScheduler } from './schedules/scheduler.local.js';
import type { ScheduleStore } from './schedules/store.js';
import type { StreamSink, Streams } from './streams/streams.js';
import { LocalStreams } from './streams/streams.local.js';
import { notifyWatch } from './watches/notify.js';
import type { WatchRunner } from './watches/runner.js';
import { LocalWatchRunner } from './watches/runner.local.js';
import type { WatchStore } from './watches/store.js';

/** One implementation per state row (connections stay per node: the ConnectionRegistry). */
export interface StateModules {
  presence: Presence;
  nonces: NonceGuard;
  delivery: Delivery;
  cap: ConnectionCap;
  limits: RateLimits;
  streams: Streams;
  clocks: MeshClocks;
  mcp: McpRegistry;
  scheduler: Scheduler;
  watches: WatchRunner;
  audit: AuditLog;
}

/** What the modules deliver through: the node's sockets, reached by session or by mesh. */
export interface Sinks {
  presenceEvents: PresenceEvents;
  toSession: (sessionId: string, frame: object) => void;
  toMesh: (meshId: string, frame: object) => void;
  streams: StreamSink;
}

export interface ModuleContext {
  config: BrokerConfig;
  pool: Pool;
  log: Logger;
  metrics: BrokerMetrics;
  connections: ConnectionRegistry;
  messages: MessageStore;
  schedules: ScheduleStore;
  watchStore: WatchStore;
  sinks: Sinks;
}

export function createLocalModules(context: ModuleContext): StateModules {
  const { config, pool, log, metrics, connections, sinks } = context;
  const audit = new LocalAuditLog(pool, log, {
    appended: (count) => metrics.auditAppends.inc({ mode: 'local' }, count),
    failed: (count) => metrics.auditAppendFailures.inc(count),
  });
  const delivery = new LocalDelivery(connections, (path, count) => metrics.deliveries.inc({ path }, count));
  const modules: StateModules = {
    audit,
    delivery,
    presence: new LocalPresence({
      pool,
      nodeId: config.nodeId,
      graceMs: config.presenceGraceMs,
      events: sinks.presenceEvents,
      log,
    }),
    nonces: new LocalNonceGuard(2 * config.helloSkewMs),
    cap: new LocalConnectionCap(config.meshConnectionCap),
    limits: new LocalRateLimits(ratePolicies(config)),
    streams: new LocalStreams(sinks.streams),
    clocks: new LocalClocks({
      pool,
      nodeId: config.nodeId,
      tickMs: config.clockTickMs,
      log,
      hasSessions: (meshId) => connections.meshSize(meshId) > 0,
      sink: (meshId, frame) => {
        metrics.clockTicks.inc();
        sinks.toMesh(meshId, frame);
      },
    }),
    mcp: new LocalMcpRegistry(sinks.toSession, config.mcpCallTimeoutMs),
    scheduler: new LocalScheduler(
      context.schedules,
      fireOccurrence({ messages: context.messages, delivery: () => modules.delivery, audit, metrics, log }),
      log,
    ),
    watches: new LocalWatchRunner(
      context.watchStore,
      notifyWatch(context.messages, () => modules.delivery, metrics),
      {
        timeoutMs: config.watchFetchTimeoutMs,
        maxBytes: config.watchMaxBytes,
        allowPrivate: config.watchAllowPrivate,
      },
      log,
    ),
  };
  return modules;
}
