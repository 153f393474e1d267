/**
 * The composition root of a broker node: builds every module, chooses each state row's implementation
 * (only the local ones exist so far), wires them to the gateway and the HTTP routes, and owns the start
 * and drain order. No other file knows more than one module.
 */
import websocket from '@fastify/websocket';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import { Redis } from 'ioredis';
import { z } from 'zod';
import type { BrokerConfig } from './config.js';
import type { Connection } from './connections/connection.js';
import { ConnectionRegistry } from './connections/registry.js';
import { runMigrations } from './db/migrate.js';
import { createPool } from './db/pool.js';
import type { Delivery } from './delivery/delivery.js';
import { LocalDelivery } from './delivery/delivery.local.js';
import { registerMessaging, replayBacklog } from './delivery/messaging.js';
import { MessageStore } from './delivery/store.js';
import { HelloAdmission } from './hello/admission.js';
import { LocalNonceGuard } from './hello/nonces.local.js';
import { registerAdmin } from './http/admin.js';
import { registerErrorHandler } from './http/errors.js';
import { registerHealth } from './http/health.js';
import { Directory } from './identity/directory.js';
import { createLogger, type Logger } from './log.js';
import { BrokerMetrics } from './metrics.js';
import { NodeHeartbeat } from './nodes/heartbeat.js';
import { registerPresenceFrames } from './presence/frames.js';
import type { Presence, PresenceFrame } from './presence/presence.js';
import { LocalPresence } from './presence/presence.local.js';
import { CloseCode } from './protocol/errors.js';
import { rid } from './protocol/frames.js';
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
  const store = new MessageStore(pool);
  const router = new Router();

  const broadcastPresence = (meshId: string, frame: PresenceFrame) => {
    for (const connection of connections.ofMesh(meshId)) {
      if (connection.identity?.sessionId !== frame.sessionId) connection.send(frame);
    }
  };
  const presence: Presence = new LocalPresence({
    pool,
    nodeId: config.nodeId,
    graceMs: config.presenceGraceMs,
    events: broadcastPresence,
    log,
  });
  const delivery: Delivery = new LocalDelivery(connections, (path, count) =>
    metrics.deliveries.inc({ path }, count),
  );
  const nonces = new LocalNonceGuard(2 * config.helloSkewMs);

  registerMessaging(router, { store, delivery: () => delivery, metrics, maxBodyBytes: config.maxBodyBytes });
  registerPresenceFrames(router, presence);
  router.on('ping', pingFrame, async () => ({ type: 'pong', ts: Date.now() }));

  const gateway = new Gateway({
    nodeId: config.nodeId,
    heartbeatMs: config.heartbeatMs,
    admission: new HelloAdmission({ directory, nonces, presence, skewMs: config.helloSkewMs }),
    presence,
    connections,
    router,
    metrics,
    log,
    onSessionStart: (connection: Connection) => replayBacklog(connection, store, metrics),
  });

  let draining = false;
  const app: FastifyInstance = Fastify({
    loggerInstance: log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 1024 * 1024,
  });
  registerErrorHandler(app);
  await app.register(websocket, { options: { maxPayload: config.maxFrameBytes } });
  app.get('/ws', { websocket: true }, (socket, request) => gateway.accept(socket, request));
  registerHealth(app, { nodeId: config.nodeId, pool, redis, metrics, draining: () => draining });
  app.get('/metrics', async (_request, reply) =>
    reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
  );
  registerAdmin(app, {
    adminToken: config.adminToken,
    directory,
    pool,
    onRevoked: async (member) => {
      for (const connection of [...connections.ofMember(member.id)]) {
        connection.close(CloseCode.memberRevoked, 'member revoked');
        if (connection.identity) await presence.leave(connection.identity);
      }
    },
  });

  await presence.start();
  const address = await app.listen({ host: config.host, port: config.port });
  const url = address.replace('[::1]', 'localhost');
  const heartbeat = new NodeHeartbeat(pool, config.nodeId, url, config.heartbeatMs, log);
  await heartbeat.start();
  log.info({ url, ws: `${url.replace(/^http/, 'ws')}/ws` }, 'broker node listening');

  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      draining = true;
      log.info('draining: closing every peer with 1001');
      gateway.drain();
      await presence.close().catch((error) => log.warn({ err: error }, 'could not clear presence'));
      await delivery.close();
      await nonces.close();
      await heartbeat.stop();
      await app.close();
      await pool.end().catch(() => {});
      redis.disconnect();
      log.info('node stopped');
    })();
    return stopping;
  };

  return { nodeId: config.nodeId, url, app, log, stop };
}
