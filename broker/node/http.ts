/**
 * A node's HTTP side on one port: the WebSocket at `/ws`, `/health` (and `/health/active`), `/metrics`,
 * `/flags`, `POST /hook/status` and the admin API (docs/protocol.md § workbench contract).
 */
import websocket from '@fastify/websocket';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import type { Bus } from '../bus/bus.js';
import type { BrokerConfig } from '../config.js';
import type { Pool } from '../db/pool.js';
import type { FlagRuntime } from '../flag-runtime.js';
import { registerAdmin } from '../http/admin.js';
import { registerErrorHandler } from '../http/errors.js';
import { type NodeLifecycle, probeDependencies, registerHealth } from '../http/health.js';
import { registerHook } from '../http/hook.js';
import type { Directory } from '../identity/directory.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import type { NodeRows } from '../modules.js';
import type { RedisClient } from '../redis/clients.js';
import type { Sessions } from './sessions.js';

export interface HttpOptions {
  config: BrokerConfig;
  pool: Pool;
  redis: RedisClient;
  bus: Bus;
  log: Logger;
  metrics: BrokerMetrics;
  directory: Directory;
  rows: NodeRows;
  sessions: Sessions;
  flags: FlagRuntime;
  lifecycle: () => NodeLifecycle;
}

export async function createHttp(options: HttpOptions): Promise<FastifyInstance> {
  const { config, pool, redis, log, metrics, rows, sessions } = options;
  const { reconciler } = rows;
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
  app.get('/ws', { websocket: true }, (socket, request) => sessions.gateway.accept(socket, request));
  registerHealth(app, {
    nodeId: config.nodeId,
    pool,
    redis,
    metrics,
    lifecycle: options.lifecycle,
    backgroundActive: () => reconciler.backgroundAllowed(),
    activeLease: () => {
      const holds = reconciler.holdsActiveLease();
      return holds === undefined ? 'off' : holds ? 'holder' : 'standby';
    },
  });
  app.get('/metrics', async (_request, reply) => {
    await probeDependencies({ pool, redis, metrics });
    return reply.type(metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  registerHook(app, rows.presence, rows.limits, metrics);
  app.get('/flags', async () => ({ node: config.nodeId, ...options.flags.report() }));
  if (config.adminTokenPrevious !== undefined)
    log.warn('ADMIN_TOKEN_PREVIOUS is set: the retiring admin token is accepted until it is removed');
  registerAdmin(app, {
    adminToken: config.adminToken,
    adminTokenPrevious: config.adminTokenPrevious,
    // Each use is counted and logged with its route, so the operator finishing a rotation sees which
    // client still sends the old token, and when none does.
    onPreviousTokenUsed: (request) => {
      metrics.adminPreviousTokenUses.inc();
      log.warn(
        { method: request.method, url: request.url, remote: request.ip },
        'admin request authorised by ADMIN_TOKEN_PREVIOUS: switch this client to ADMIN_TOKEN',
      );
    },
    directory: options.directory,
    pool,
    onHomeRegionSet: (meshId, change) =>
      rows.audit.record({ meshId, eventType: 'mesh.home_region_set', actor: 'admin', payload: change }),
    endOwnedWork: (member) => rows.set.memberRevoked(member),
    shadow: () => reconciler.shadowReports(),
    // Here at once, and on every other node of the mesh over the bus (the revoked member may be
    // connected anywhere), with each node's count of what it closed: node/revocations.ts.
    onRevoked: (member) => sessions.revocations.revokeEverywhere(member),
  });
  return app;
}
