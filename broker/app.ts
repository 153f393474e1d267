/**
 * The composition root of a broker node: builds the infrastructure and the state-row modules, wires
 * them to the gateway and the HTTP routes, and owns the start and drain order. Feature modules only
 * register their frames; none of them knows another.
 */
import websocket from '@fastify/websocket';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { recordFlagChange } from '../flags/changes.js';
import { subscribeRefresh } from '../flags/refresh-bus.js';
import { registerAuditFrames } from './audit/frames.js';
import { Bus } from './bus/bus.js';
import { registerClockFrames } from './clock/frames.js';
import type { BrokerConfig } from './config.js';
import type { Connection } from './connections/connection.js';
import { ConnectionRegistry } from './connections/registry.js';
import { runMigrations } from './db/migrate.js';
import { createPool } from './db/pool.js';
import { registerMessaging, replayBacklog } from './delivery/messaging.js';
import { MessageStore } from './delivery/store.js';
import { createFlagProvider } from './flag-provider.js';
import { FlagRuntime } from './flag-runtime.js';
import { HelloAdmission } from './hello/admission.js';
import { registerAdmin } from './http/admin.js';
import { registerErrorHandler } from './http/errors.js';
import { probeDependencies, registerHealth } from './http/health.js';
import { registerHook } from './http/hook.js';
import { Directory } from './identity/directory.js';
import { createLogger, type Logger } from './log.js';
import { registerMcpFrames } from './mcp/frames.js';
import { BrokerMetrics } from './metrics.js';
import { createModules } from './modules.js';
import { NodeHeartbeat } from './nodes/heartbeat.js';
import { registerPresenceFrames } from './presence/frames.js';
import type { PresenceFrame } from './presence/presence.js';
import { CloseCode } from './protocol/errors.js';
import { rid } from './protocol/frames.js';
import { registerScheduleFrames } from './schedules/frames.js';
import { ScheduleStore } from './schedules/store.js';
import { registerStreamFrames } from './streams/frames.js';
import { registerWatchFrames } from './watches/frames.js';
import { WatchStore } from './watches/store.js';
import { Gateway } from './ws/gateway.js';
import { Router } from './ws/router.js';

/** `ping` → `pong`: lets a peer check the path to its node end to end. */
const pingFrame = z.object({ type: z.literal('ping'), rid });

export interface BrokerNode {
  readonly nodeId: string;
  /** `http://host:port` of this node (the WebSocket is at `/ws`). */
  readonly url: string;
  readonly app: FastifyInstance;
  readonly log: Logger;
  /** Drains and stops the node: 1001 to every peer, this node's presence cleared, clients closed. */
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Replaces the JSON logger (tests pass a silent one). */
  log?: Logger;
}

export async function startBroker(config: BrokerConfig, options: StartOptions = {}): Promise<BrokerNode> {
  const log = options.log ?? createLogger(config.nodeId, config.logLevel);
  await runMigrations(config.databaseUrl);

  const pool = createPool(config.databaseUrl, { applicationName: `mesh-broker:${config.nodeId}` });
  const redis = new Redis(config.redisUrl, {
    keyPrefix: config.redisKeyPrefix,
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    retryStrategy: (attempt) => Math.min(attempt * 200, 2000),
  });
  redis.on('error', (error) => log.debug({ err: error }, 'redis error'));
  redis.connect().catch((error) => log.warn({ err: error }, 'redis not reachable at start; retrying'));

  const metrics = new BrokerMetrics(config.nodeId);
  const connections = new ConnectionRegistry();
  const directory = new Directory(pool);
  const messages = new MessageStore(pool);
  const schedules = new ScheduleStore(pool);
  const watchStore = new WatchStore(pool);

  // The one inbound path: every module reaches this node's sockets through these sinks.
  // A frame for many sockets (ticks, presence events, stream data) is serialized once, not per socket:
  // fan-out is the hottest path of a node.
  const toMesh = (meshId: string, frame: object, exceptSession?: string) => {
    const text = JSON.stringify(frame);
    for (const connection of connections.ofMesh(meshId)) {
      if (connection.identity?.sessionId !== exceptSession) connection.sendText(text);
    }
  };
  const toSession = (sessionId: string, frame: object) => connections.session(sessionId)?.send(frame);
  const onPresence = (meshId: string, frame: PresenceFrame) => {
    toMesh(meshId, frame, frame.sessionId);
    if (frame.type === 'peer.status') return;
    modules.audit.record({
      meshId,
      eventType: frame.type,
      actor: frame.pubkey,
      payload: { sessionId: frame.sessionId, node: config.nodeId },
    });
    if (frame.type === 'peer.left') void sessionEnded(meshId, frame.sessionId);
  };
  // One subscriber connection for everything the node listens to (bus channels, flag pushes).
  const subscriber = redis.duplicate({ keyPrefix: '', enableOfflineQueue: true, lazyConnect: false });
  subscriber.on('error', (error) => log.debug({ err: error }, 'redis (subscriber) error'));
  const bus = new Bus({
    publisher: redis,
    subscriber,
    prefix: config.redisKeyPrefix,
    nodeId: config.nodeId,
    log,
    onPublishFailure: () => metrics.busPublishFailures.inc(),
  });
  await bus.start();

  const { modules, switches, startBackground, backgroundActive } = createModules({
    config,
    redis,
    bus,
    pool,
    log,
    metrics,
    connections,
    messages,
    schedules,
    watchStore,
    sinks: {
      presenceEvents: onPresence,
      presenceRelay: (meshId, frame) => toMesh(meshId, frame, frame.sessionId),
      kickLocal: (sessionId) =>
        connections
          .session(sessionId)
          ?.close(CloseCode.sessionReplaced, 'session replaced by a newer connection'),
      toSession,
      toMesh,
      streams: (sessionIds: Iterable<string>, frame: object) => {
        const text = JSON.stringify(frame);
        for (const sessionId of sessionIds) connections.session(sessionId)?.sendText(text);
      },
    },
  });

  /** A session left for good: everything it held on this node ends with it. */
  const sessionEnded = async (meshId: string, sessionId: string) => {
    try {
      await modules.streams.sessionEnded(meshId, sessionId);
      await modules.mcp.sessionEnded(meshId, sessionId);
      await modules.watches.sessionEnded(meshId, sessionId);
      await modules.clocks.meshIdle(meshId);
    } catch (error) {
      log.warn({ err: error, sessionId }, 'cleaning up after a session failed');
    }
  };

  let heartbeat: NodeHeartbeat | undefined;
  const flags = new FlagRuntime({
    environment: config.flagsEnv,
    provider: createFlagProvider(config),
    switches,
    metrics,
    log,
    onChange: (changed, snapshot, initial) => {
      heartbeat?.beatNow();
      // A hand edit of the file has no author: the first node to see it change records it (once,
      // cluster-wide). What a node reads when it starts is not a change (it may be a stray copy).
      if (snapshot.source !== 'file' || initial) return;
      for (const { flag, value } of changed) {
        recordFlagChange(pool, {
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
  await flags.start();
  // A connection of its own (subscriber mode), queueing the subscribe until it is connected.
  subscribeRefresh(subscriber, config.redisKeyPrefix, config.flagsEnv, () => flags.refresh()).catch((error) =>
    log.warn({ err: error }, 'flags: no push subscription (the poll still applies changes)'),
  );

  /** Closes every socket of a revoked member on this node (4403) and ends its sessions. */
  const endMemberSessions = async (memberId: number) => {
    for (const connection of [...connections.ofMember(memberId)]) {
      connection.close(CloseCode.memberRevoked, 'member revoked');
      if (connection.identity) await modules.presence.leave(connection.identity);
    }
  };
  bus.on('member.revoked', (_meshId, payload) => {
    endMemberSessions(Number(payload.memberId)).catch((error) =>
      log.warn({ err: error }, 'ending revoked sessions failed'),
    );
  });

  const router = new Router();
  registerMessaging(router, {
    store: messages,
    delivery: modules.delivery,
    limits: modules.limits,
    audit: modules.audit,
    metrics,
    maxBodyBytes: config.maxBodyBytes,
  });
  registerPresenceFrames(router, modules.presence);
  registerStreamFrames(router, modules.streams, metrics);
  registerClockFrames(router, modules.clocks);
  registerMcpFrames(router, modules.mcp, modules.audit);
  registerScheduleFrames(router, {
    store: schedules,
    scheduler: modules.scheduler,
    directory,
    audit: modules.audit,
    maxPerMember: config.scheduleMaxPerMember,
    maxBodyBytes: config.maxBodyBytes,
  });
  registerWatchFrames(router, {
    store: watchStore,
    runner: modules.watches,
    audit: modules.audit,
    nodeId: config.nodeId,
    limits: { perMember: config.watchMaxPerMember, perMesh: config.watchMaxPerMesh },
    allowPrivate: config.watchAllowPrivate,
  });
  registerAuditFrames(router, pool, modules.audit);
  router.on('ping', pingFrame, async () => ({ type: 'pong', ts: Date.now() }));

  const gateway = new Gateway({
    nodeId: config.nodeId,
    heartbeatMs: config.heartbeatMs,
    admission: new HelloAdmission({
      directory,
      nonces: modules.nonces,
      presence: modules.presence,
      skewMs: config.helloSkewMs,
    }),
    presence: modules.presence,
    cap: modules.cap,
    connections,
    router,
    metrics,
    log,
    onSessionStart: async (connection: Connection) => {
      const identity = connection.identity!;
      // Subscribe to the mesh's channel before anything of the session can be published (ref-counted).
      bus.joinMesh(identity.meshId);
      await modules.streams.sessionStarted(identity.meshId, identity.sessionId);
      await modules.mcp.hostReconnected(identity);
      await modules.clocks.meshActive(identity.meshId);
      await replayBacklog(connection, messages, metrics);
    },
    onSocketClosed: (identity) => modules.mcp.hostDisconnected(identity),
    onConnectionGone: (identity) => bus.leaveMesh(identity.meshId),
  });

  let draining = false;
  const app: FastifyInstance = Fastify({
    loggerInstance: log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 1024 * 1024,
  });
  registerErrorHandler(app);
  await app.register(websocket, {
    options: { maxPayload: config.maxFrameBytes },
    // A socket's errors are its peer's doing (an oversized frame, broken framing, a reset): a line at
    // info, not an error-level log a misbehaving client could flood. ws has already sent 1009 and the
    // like; the socket is done.
    errorHandler: (error, socket, request) => {
      request.log.info({ err: error }, 'websocket error');
      socket.terminate();
    },
  });
  app.get('/ws', { websocket: true }, (socket, request) => gateway.accept(socket, request));
  registerHealth(app, {
    nodeId: config.nodeId,
    pool,
    redis,
    metrics,
    draining: () => draining,
    backgroundActive,
  });
  app.get('/metrics', async (_request, reply) => {
    await probeDependencies({ pool, redis, metrics });
    return reply.type(metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  registerHook(app, modules.presence, modules.limits, metrics);
  app.get('/flags', async () => ({ node: config.nodeId, ...flags.report() }));
  registerAdmin(app, {
    adminToken: config.adminToken,
    directory,
    pool,
    // Here at once, and on every other node of the mesh over the bus (the revoked member may be
    // connected anywhere; its sends are refused by the store whatever node it is on).
    onRevoked: async (member) => {
      await endMemberSessions(member.id);
      await bus.publishToMesh(member.meshId, 'member.revoked', { memberId: member.id });
    },
  });

  await modules.presence.start();
  await startBackground();
  const address = await app.listen({ host: config.host, port: config.port });
  const url = address.replace('[::1]', 'localhost');
  heartbeat = new NodeHeartbeat(pool, config.nodeId, url, config.heartbeatMs, log, () => ({
    environment: config.flagsEnv,
    flags: flags.report(),
  }));
  await heartbeat.start();
  log.info({ url, ws: `${url.replace(/^http/, 'ws')}/ws` }, 'broker node listening');

  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      draining = true;
      log.info('draining: closing every peer with 1001');
      gateway.drain();
      await bus.close();
      await flags.close();
      for (const row of switches) {
        await row
          .closeAll()
          .catch((error) => log.warn({ err: error, flag: row.flag }, 'closing a module failed'));
      }
      await heartbeat?.stop();
      await app.close();
      await pool.end().catch(() => {});
      redis.disconnect();
      log.info('node stopped');
    })();
    return stopping;
  };

  return { nodeId: config.nodeId, url, app, log, stop };
}
