/**
 * The state rows of DESIGN §2 as this node runs them. This is the only place that builds
 * implementations: per row a local one, a shared one where this build has it, and the `Switch` that the
 * row's flag moves between them at runtime. Modules never read flags and never know each other.
 */
import type { Redis } from 'ioredis';
import type { AuditLog } from './audit/audit.js';
import { LocalAuditLog } from './audit/audit.local.js';
import { SharedAuditLog } from './audit/audit.shared.js';
import type { Bus } from './bus/bus.js';
import type { MeshClocks } from './clock/clock.js';
import { LocalClocks } from './clock/clock.local.js';
import { SharedClocks } from './clock/clock.shared.js';
import type { BrokerConfig } from './config.js';
import type { ConnectionRegistry } from './connections/registry.js';
import type { Pool } from './db/pool.js';
import type { Delivery } from './delivery/delivery.js';
import { LocalDelivery } from './delivery/delivery.local.js';
import { SharedDelivery } from './delivery/delivery.shared.js';
import type { MessageStore } from './delivery/store.js';
import type { NonceGuard } from './hello/nonces.js';
import { LocalNonceGuard } from './hello/nonces.local.js';
import { SharedNonceGuard } from './hello/nonces.shared.js';
import { ActiveLease } from './lease/active-lease.js';
import { AlwaysActive, type BackgroundGate } from './lease/background-gate.js';
import type { ConnectionCap } from './limits/connection-cap.js';
import { LocalConnectionCap } from './limits/connection-cap.local.js';
import { SharedConnectionCap } from './limits/connection-cap.shared.js';
import { type RateLimits, ratePolicies } from './limits/rate-limits.js';
import { LocalRateLimits } from './limits/rate-limits.local.js';
import { SharedRateLimits } from './limits/rate-limits.shared.js';
import type { Logger } from './log.js';
import type { McpRegistry } from './mcp/mcp.js';
import { LocalMcpRegistry } from './mcp/mcp.local.js';
import { SharedMcpRegistry } from './mcp/mcp.shared.js';
import type { BrokerMetrics } from './metrics.js';
import type { Presence, PresenceEvents } from './presence/presence.js';
import { LocalPresence } from './presence/presence.local.js';
import { SharedPresence } from './presence/presence.shared.js';
import { fireOccurrence } from './schedules/fire.js';
import type { Scheduler } from './schedules/scheduler.js';
import { LocalScheduler } from './schedules/scheduler.local.js';
import { SharedScheduler } from './schedules/scheduler.shared.js';
import type { ScheduleStore } from './schedules/store.js';
import type { StreamSink, Streams } from './streams/streams.js';
import { LocalStreams } from './streams/streams.local.js';
import { SharedStreams } from './streams/streams.shared.js';
import { type RowSwitch, Switch } from './switching.js';
import { notifyWatch } from './watches/notify.js';
import { WatchPoller } from './watches/poller.js';
import type { WatchRunner } from './watches/runner.js';
import { LocalWatchRunner } from './watches/runner.local.js';
import { SharedWatchRunner } from './watches/runner.shared.js';
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
  /** Presence events another node originated: to this node's sockets only. */
  presenceRelay: PresenceEvents;
  /** Closes this node's socket of a session that connected again elsewhere (4409). */
  kickLocal: (sessionId: string) => void;
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
  redis: Redis;
  bus: Bus;
}

export interface NodeModules {
  /** What the node's code uses: each forwards to the implementation its row's flag selects. */
  modules: StateModules;
  /** One per row, for the flag runtime, in the order they close at shutdown. */
  switches: RowSwitch[];
  /** Starts the background work if the gate allows it (node start), and keeps it matched after. */
  startBackground: () => Promise<void>;
  backgroundActive: () => boolean;
}

export function createModules(context: ModuleContext): NodeModules {
  const { config, pool, log, metrics, connections, sinks, redis, bus } = context;
  // Background work (schedules, watch polling) runs only where the gate allows it: with `ha.active-lease`
  // on, on the node holding the cluster's active lease. Decided here, before the modules it governs.
  let backgroundRunning = false;
  const activeLease = new ActiveLease({ pool, nodeId: config.nodeId, ttlMs: config.activeLeaseTtlMs, log });
  const gate = new Switch<BackgroundGate>(
    'ha.active-lease',
    new AlwaysActive(),
    activeLease,
    async (_from, _to, target) => {
      if (target === 'shared') await activeLease.start();
      else await activeLease.close();
    },
    () => applyBackground(),
  );
  activeLease.onChange(() => void applyBackground());
  const auditCounters = (mode: 'local' | 'shared') => ({
    appended: (count: number) => metrics.auditAppends.inc({ mode }, count),
    failed: (count: number) => metrics.auditAppendFailures.inc(count),
  });
  const localAudit = new LocalAuditLog(pool, log, auditCounters('local'));
  const audit = new Switch<AuditLog>(
    'ha.audit',
    localAudit,
    new SharedAuditLog(pool, log, auditCounters('shared')),
    // Drain what the old writer holds before the new one appends; a local writer re-reads the heads the
    // shared one moved.
    async (from, _to, target) => {
      await from.flush();
      if (target === 'local') localAudit.forgetHeads();
    },
  );
  const policies = ratePolicies(config);
  const localLimits = new LocalRateLimits(policies);
  const limits = new Switch<RateLimits>(
    'ha.rate-limits',
    localLimits,
    new SharedRateLimits(
      redis,
      policies,
      localLimits,
      () => metrics.redisFallbacks.inc({ row: 'rate-limits' }),
      log,
    ),
  );
  const sharedDelivery = new SharedDelivery({
    connections,
    bus,
    store: context.messages,
    sweepMs: config.sweepMs,
    sweepMinAgeMs: config.sweepMinAgeMs,
    delivered: (path, count) => metrics.deliveries.inc({ path }, count),
    fanoutLatency: (seconds) => metrics.fanoutLatency.observe({ kind: 'message' }, seconds),
    log,
  });
  const delivery = new Switch<Delivery>(
    'ha.delivery',
    new LocalDelivery(connections, (path, count) => metrics.deliveries.inc({ path }, count)),
    sharedDelivery,
    async (_from, _to, target) => {
      if (target === 'shared') sharedDelivery.start();
      else await sharedDelivery.stop();
    },
  );
  const sharedPresence = new SharedPresence({
    pool,
    bus,
    nodeId: config.nodeId,
    graceMs: config.presenceGraceMs,
    deadAfterMs: config.nodeDeadMs,
    reapEveryMs: config.heartbeatMs,
    events: sinks.presenceEvents,
    relay: sinks.presenceRelay,
    kickLocal: sinks.kickLocal,
    log,
  });
  const localPresence = new LocalPresence({
    pool,
    nodeId: config.nodeId,
    graceMs: config.presenceGraceMs,
    events: sinks.presenceEvents,
    log,
  });
  const presence = new Switch<Presence>(
    'ha.presence',
    localPresence,
    sharedPresence,
    async (_from, _to, target) => {
      if (target === 'shared') sharedPresence.activate();
      else {
        sharedPresence.deactivate();
        // The sessions connected here are the local implementation's again, so they can leave later.
        localPresence.adopt(connections.all().flatMap((c) => (c.identity ? [c.identity] : [])));
      }
    },
  );
  const fallback = (row: string) => () => metrics.redisFallbacks.inc({ row });
  const localNonces = new LocalNonceGuard(2 * config.helloSkewMs);
  const nonces = new Switch<NonceGuard>(
    'ha.presence',
    localNonces,
    new SharedNonceGuard(redis, 2 * config.helloSkewMs, localNonces, fallback('nonces'), log),
  );
  const localCap = new LocalConnectionCap(config.meshConnectionCap);
  const sharedCap = new SharedConnectionCap({
    redis,
    nodeId: config.nodeId,
    cap: config.meshConnectionCap,
    partTtlMs: config.nodeDeadMs,
    fallback: localCap,
    onFallback: fallback('connection-cap'),
    log,
  });
  const cap = new Switch<ConnectionCap>(
    'ha.connection-cap',
    localCap,
    sharedCap,
    async (_from, _to, target) => {
      if (target === 'shared') {
        sharedCap.start();
        await sharedCap.adopt(localCap.entries());
      } else {
        await sharedCap.stop();
      }
    },
  );
  const localStreams = new LocalStreams(sinks.streams);
  const sharedStreams = new SharedStreams(localStreams, pool, bus, (seconds) =>
    metrics.fanoutLatency.observe({ kind: 'stream' }, seconds),
  );
  const streams = new Switch<Streams>(
    'ha.streams',
    localStreams,
    sharedStreams,
    async (_from, _to, target) => {
      if (target === 'shared') await sharedStreams.adoptLocal();
    },
  );
  const clockOptions = {
    pool,
    nodeId: config.nodeId,
    tickMs: config.clockTickMs,
    log,
    hasSessions: (meshId: string) => connections.meshSize(meshId) > 0,
  };
  const toSessions = (meshId: string, frame: object) => {
    metrics.clockTicks.inc();
    sinks.toMesh(meshId, frame);
  };
  const localClocks = new LocalClocks({ ...clockOptions, sink: toSessions });
  const sharedClocks = new SharedClocks({
    pool,
    databaseUrl: config.databaseUrl,
    bus,
    nodeId: config.nodeId,
    tickMs: config.clockTickMs,
    retryMs: Math.min(500, config.clockTickMs),
    toLocalSessions: (meshId, frame) => sinks.toMesh(meshId, frame),
    hasSessions: (meshId) => connections.meshSize(meshId) > 0,
    onTick: () => metrics.clockTicks.inc(),
    onFenced: () => metrics.clockFenced.inc(),
    log,
  });
  // The clocks running on this node stop in one implementation and continue (from their rows) in the other.
  const clocks = new Switch<MeshClocks>('ha.clock', localClocks, sharedClocks, async (from, to, target) => {
    const running = (from as LocalClocks | SharedClocks).running();
    await from.close();
    if (target === 'shared') sharedClocks.activate();
    for (const meshId of running) await to.meshActive(meshId);
  });
  const mcpSink = {
    send: sinks.toSession,
    reaches: (sessionId: string) => connections.session(sessionId) !== undefined,
  };
  const localMcp = new LocalMcpRegistry(mcpSink, config.mcpCallTimeoutMs);
  const sharedMcp = new SharedMcpRegistry(pool, bus, config.nodeId, mcpSink, config.mcpCallTimeoutMs, log);
  // Servers move with the flip; calls in flight at that moment are not (see docs/mcp.md).
  const mcp = new Switch<McpRegistry>('ha.mcp', localMcp, sharedMcp, async (_from, _to, target) => {
    if (target === 'shared') await sharedMcp.adopt(localMcp.entries());
  });
  const fireOptions = {
    messages: context.messages,
    delivery: delivery.view,
    audit: audit.view,
    metrics,
    log,
  };
  const localScheduler = new LocalScheduler(context.schedules, fireOccurrence(fireOptions), log);
  const sharedScheduler = new SharedScheduler({
    ...fireOptions,
    pool,
    store: context.schedules,
    nodeId: config.nodeId,
    pollMs: config.schedulePollMs,
  });
  // Never both: the old scheduler stops before the new one arms or polls.
  const scheduler = new Switch<Scheduler>(
    'ha.schedules',
    localScheduler,
    sharedScheduler,
    async (_from, _to, target) => {
      if (target === 'shared') {
        await localScheduler.close();
        if (backgroundRunning) sharedScheduler.activate();
      } else {
        await sharedScheduler.deactivate();
        if (backgroundRunning) await localScheduler.start();
      }
    },
  );
  // One poller: the two runners only decide which watches this node polls.
  const poller = new WatchPoller(
    context.watchStore,
    notifyWatch(context.messages, delivery.view, metrics),
    {
      timeoutMs: config.watchFetchTimeoutMs,
      maxBytes: config.watchMaxBytes,
      allowPrivate: config.watchAllowPrivate,
    },
    log,
  );
  const sharedWatches = new SharedWatchRunner({
    pool,
    poller,
    nodeId: config.nodeId,
    leaseMs: config.nodeDeadMs,
    nodeDeadMs: config.nodeDeadMs,
    // Under the active lease only the holder runs the runner: it takes every watch.
    soleRunner: () => gate.using === 'shared',
    log,
  });
  const watches = new Switch<WatchRunner>(
    'ha.watches',
    new LocalWatchRunner(context.watchStore, poller, log),
    sharedWatches,
    async (_from, _to, target) => {
      if (target === 'shared' && backgroundRunning) sharedWatches.activate();
      else await sharedWatches.deactivate();
    },
  );

  metrics.watchOwnership({
    clocksLed: () => (clocks.using === 'shared' ? sharedClocks.leading() : localClocks.running().length),
    watchesOwned: () => poller.ids().length,
  });

  /** Starts or stops this node's background work to match the gate (and at node start). */
  let applying: Promise<void> = Promise.resolve();
  const applyBackground = (): Promise<void> => {
    applying = applying.then(async () => {
      const allowed = gate.view.isActive();
      metrics.activeLease.set(gate.using === 'shared' && allowed ? 1 : 0);
      if (allowed === backgroundRunning) return;
      backgroundRunning = allowed;
      log.info(
        { backgroundWork: allowed },
        allowed ? 'running background work' : 'background work stopped (standby)',
      );
      try {
        if (allowed) {
          await scheduler.view.start();
          await watches.view.start();
        } else {
          await scheduler.view.close();
          await watches.view.close();
        }
      } catch (error) {
        // Never leave the chain rejected (it would stop following the gate): undo and try again soon.
        log.error({ err: error }, 'starting or stopping background work failed; retrying');
        backgroundRunning = !allowed;
        setTimeout(() => void applyBackground(), 1000).unref();
      }
    });
    return applying;
  };
  return {
    startBackground: applyBackground,
    backgroundActive: () => backgroundRunning,
    modules: {
      audit: audit.view,
      limits: limits.view,
      delivery: delivery.view,
      presence: presence.view,
      nonces: nonces.view,
      cap: cap.view,
      streams: streams.view,
      clocks: clocks.view,
      mcp: mcp.view,
      scheduler: scheduler.view,
      watches: watches.view,
    },
    // Background work stops first, the audit log drains after everything that records, presence last.
    // At shutdown background work stops before the active lease is given up (a standby must not start
    // firing while this node still fires).
    switches: [
      scheduler,
      watches,
      gate,
      clocks,
      mcp,
      streams,
      delivery,
      audit,
      presence,
      nonces,
      cap,
      limits,
    ],
  };
}
