/**
 * The composition root of a broker node: infrastructure (node/infrastructure.ts), the state rows
 * (modules.ts) moved by the flags, the peer side (node/sessions.ts) and the HTTP side (node/http.ts),
 * started in one ordered list and stopped in its reverse. Feature modules only register their frames;
 * none of them knows another.
 */
import type { FastifyInstance } from 'fastify';
import { recordFlagChange } from '../flags/changes.js';
import { subscribeRefresh } from '../flags/refresh-bus.js';
import { CloseCode } from '../protocol/errors.js';
import type { BrokerConfig } from './config.js';
import { ConnectionRegistry } from './connections/registry.js';
import { Retention } from './delivery/retention.js';
import { MessageStore } from './delivery/store.js';
import { flagChangeLedger } from './flag-changes.js';
import { createFlagProvider } from './flag-provider.js';
import { FlagRuntime } from './flag-runtime.js';
import { Directory } from './identity/directory.js';
import { createLogger, type Logger } from './log.js';
import { NodeHeartbeat } from './membership/heartbeat.js';
import { BrokerMetrics } from './metrics.js';
import { createModules, type StateModules } from './modules.js';
import { createHttp } from './node/http.js';
import { type Infrastructure, openInfrastructure } from './node/infrastructure.js';
import { createSessions, type Sessions } from './node/sessions.js';
import type { PresenceFrame } from './presence/presence.js';
import { RedisGuard } from './redis/guard.js';
import type { RowReconciler } from './rows/reconciler.js';
import { ScheduleStore } from './schedules/store.js';
import { WatchStore } from './watches/store.js';

export interface BrokerNode {
  readonly nodeId: string;
  /** `http://host:port` of this node (the WebSocket is at `/ws`). */
  readonly url: string;
  readonly app: FastifyInstance;
  readonly log: Logger;
  readonly metrics: BrokerMetrics;
  /** Typed events of the node (rows switched, background work allowed or not): see rows/reconciler.ts. */
  readonly events: RowReconciler;
  /** Drains and stops the node: 1001 to every peer, this node's presence cleared, clients closed. */
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Replaces the JSON logger (tests pass a silent one). */
  log?: Logger;
}

/** One step of the node's life: started in list order, stopped in reverse. */
interface Step {
  name: string;
  start?: () => Promise<void>;
  stop?: () => Promise<void>;
}

/** A start that failed: which step, and why (the cause's message, so the one line an operator sees says it). */
export class StartupError extends Error {
  constructor(
    readonly step: string,
    cause: unknown,
  ) {
    super(`start-up failed (${step}): ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'StartupError';
  }
}

/**
 * Starts a node. A start that fails closes everything it had opened before it rejects (database pool,
 * Redis clients, timers, the listening socket), so a process whose start failed ends by itself instead
 * of being kept alive by an open handle.
 */
export async function startBroker(config: BrokerConfig, options: StartOptions = {}): Promise<BrokerNode> {
  const log = options.log ?? createLogger(config.nodeId, config.logLevel);
  const metrics = new BrokerMetrics(config.nodeId);
  let infrastructure: Infrastructure;
  try {
    infrastructure = await openInfrastructure(config, log, metrics);
  } catch (error) {
    throw new StartupError('infrastructure', error);
  }
  try {
    return await assembleNode(config, log, metrics, infrastructure);
  } catch (error) {
    await infrastructure.close();
    throw error instanceof StartupError ? error : new StartupError('assembly', error);
  }
}

/** Everything on top of the infrastructure, started step by step; a failed step stops them all again. */
async function assembleNode(
  config: BrokerConfig,
  log: Logger,
  metrics: BrokerMetrics,
  infrastructure: Infrastructure,
): Promise<BrokerNode> {
  const { pool, readPool, redis, counters, pubsub, bus } = infrastructure;
  const connections = new ConnectionRegistry();
  const directory = new Directory(pool);
  const messages = new MessageStore(pool, {
    backlogMax: config.backlogMax,
    onBatch: (kind, size) => metrics.commitBatch.observe({ kind }, size),
  });
  const schedules = new ScheduleStore(pool);
  const retention = new Retention({
    pool,
    messageRetentionMs: config.messageRetentionMs,
    backlogMaxAgeMs: config.backlogMaxAgeMs,
    intervalMs: config.retentionIntervalMs,
    removed: (what, count) => metrics.retentionDeleted.inc({ what }, count),
    log,
  });
  const watchStore = new WatchStore(pool);

  // The one inbound path: every row reaches this node's sockets through these sinks. A frame for many
  // sockets (ticks, presence events, stream data) is serialized once, not per socket: fan-out is the
  // hottest path of a node.
  const toMesh = (meshId: string, frame: object, exceptSession?: string) => {
    const text = JSON.stringify(frame);
    for (const connection of connections.ofMesh(meshId)) {
      if (connection.identity?.sessionId !== exceptSession) connection.sendText(text);
    }
  };
  // Presence events this node originates also audit and, on a leave, end what the session held here.
  let modules: StateModules | undefined;
  let sessions: Sessions | undefined;
  const onPresence = (meshId: string, frame: PresenceFrame) => {
    toMesh(meshId, frame, frame.sessionId);
    if (frame.type === 'peer.status') return;
    modules?.audit.record({
      meshId,
      eventType: frame.type,
      actor: frame.pubkey,
      payload: { sessionId: frame.sessionId, node: config.nodeId },
    });
    if (frame.type === 'peer.left') void sessions?.sessionEnded(meshId, frame.sessionId);
  };

  const rows = createModules({
    config,
    pool,
    log,
    metrics,
    connections,
    messages,
    schedules,
    watchStore,
    readPool,
    redis: counters,
    redisGuard: new RedisGuard(counters),
    bus,
    sinks: {
      presenceEvents: onPresence,
      presenceRelay: (meshId, frame) => {
        toMesh(meshId, frame, frame.sessionId);
        // A session's end announced by another node: its grace may have run out there (it moved, then
        // left), or another node's reaper deleted the row before this node's grace timer fired. Either way
        // this node may still hold something of it (a stream subscription, a hosted MCP server, a watch), so
        // it ends what it holds too. The shared state was cleaned where the leave originated; these hooks
        // are idempotent there. A session connected here again is alive: nothing of it ends.
        if (frame.type === 'peer.left' && !connections.session(frame.sessionId))
          void sessions?.sessionEnded(meshId, frame.sessionId);
      },
      kickLocal: (sessionId) =>
        connections
          .session(sessionId)
          ?.close(CloseCode.sessionReplaced, 'session replaced by a newer connection'),
      toSession: (sessionId, frame) => connections.session(sessionId)?.send(frame),
      toMesh,
      streams: (sessionIds, frame) => {
        const text = JSON.stringify(frame);
        for (const sessionId of sessionIds) connections.session(sessionId)?.sendText(text);
      },
    },
  });
  modules = rows.modules;
  const { reconciler } = rows;

  let heartbeat: NodeHeartbeat | undefined;
  const flags = new FlagRuntime({
    environment: config.flagsEnv,
    provider: createFlagProvider(config),
    reconciler,
    metrics,
    log,
    onChange: (changed, snapshot, initial) => {
      heartbeat?.beatNow();
      // A hand edit of the file has no author: the first node to see it change records it (once,
      // cluster-wide). What a node reads when it starts is not a change (it may be a stray copy).
      if (snapshot.source !== 'file' || initial) return;
      for (const { flag, value } of changed) {
        recordFlagChange(flagChangeLedger(pool), {
          environment: config.flagsEnv,
          flag,
          value,
          actor: `node:${config.nodeId}`,
          // A change of a boolean: it was the other value (what this node acted on until now).
          previous: !value,
        }).catch((error) => log.warn({ err: error, flag }, 'could not record a flag change'));
      }
    },
  });

  sessions = createSessions({
    config,
    pool,
    bus,
    log,
    metrics,
    connections,
    directory,
    messages,
    schedules,
    watchStore,
    modules,
    sessionHooks: rows.sessionHooks,
  });
  let draining = false;
  const app = await createHttp({
    config,
    pool,
    redis,
    bus,
    log,
    metrics,
    directory,
    modules,
    sessions,
    flags,
    reconciler,
    draining: () => draining,
  });
  const gateway = sessions.gateway;
  let url = '';

  const steps: Step[] = [
    { name: 'infrastructure', stop: () => infrastructure.close() },
    // The first snapshot activates every row (boot), background work where the gate allows it.
    { name: 'rows', start: () => flags.start(), stop: () => reconciler.close() },
    { name: 'flag source', stop: () => flags.close() },
    { name: 'retention', start: async () => retention.start(), stop: () => retention.stop() },
    {
      name: 'flag pushes',
      // A connection of its own (subscriber mode), queueing the subscribe until it is connected.
      start: async () =>
        subscribeRefresh(pubsub, config.redisKeyPrefix, config.flagsEnv, () => flags.refresh()).catch(
          (error) => log.warn({ err: error }, 'flags: no push subscription (the poll still applies changes)'),
        ),
    },
    {
      name: 'http',
      start: async () => {
        url = (await app.listen({ host: config.host, port: config.port })).replace('[::1]', 'localhost');
      },
      stop: () => app.close(),
    },
    {
      name: 'heartbeat',
      start: async () => {
        heartbeat = new NodeHeartbeat(
          pool,
          config.nodeId,
          url,
          config.heartbeatMs,
          log,
          () => ({ environment: config.flagsEnv, flags: flags.report() }),
          config.region ?? null,
        );
        await heartbeat.start();
      },
      stop: async () => heartbeat?.stop(),
    },
    {
      name: 'peers',
      stop: async () => {
        draining = true;
        if (!url) return; // never listened (a failed start): no peer to drain
        log.info('draining: closing every peer with 1001');
        await gateway.drain(config.drainTimeoutMs);
      },
    },
  ];
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      for (const step of [...steps].reverse()) {
        await step.stop?.().catch((error) => log.warn({ err: error, step: step.name }, 'stopping failed'));
      }
      log.info('node stopped');
    })();
    return stopping;
  };
  for (const step of steps) {
    try {
      await step.start?.();
    } catch (error) {
      // Every step's stop is safe on what never started; stopping them all also covers a step that
      // started half (a flag provider whose client exists, a socket that is bound).
      log.warn({ step: step.name }, 'start-up failed; closing what was opened');
      await stop();
      throw new StartupError(step.name, error);
    }
  }
  log.info({ url, ws: `${url.replace(/^http/, 'ws')}/ws` }, 'broker node listening');

  return { nodeId: config.nodeId, url, app, log, metrics, events: reconciler, stop };
}
