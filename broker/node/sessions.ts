/**
 * The peer side of a node: the router with every row's frames, and the gateway whose session life runs
 * the rows' session hooks in row order. Also ends a revoked member's sessions, here and on every node.
 */

import { pingFrame } from '../../protocol/requests.js';
import type { Bus } from '../bus/bus.js';
import type { BrokerConfig } from '../config.js';
import type { Connection } from '../connections/connection.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import type { Pool } from '../db/pool.js';
import { SessionFeed } from '../delivery/feed.js';
import { HelloAdmission } from '../hello/admission.js';
import type { Directory } from '../identity/directory.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import type { NodeRows } from '../modules.js';
import { Gateway } from '../ws/gateway.js';
import { Router } from '../ws/router.js';
import { createRevocations, type Revocations } from './revocations.js';

export interface SessionsOptions {
  config: BrokerConfig;
  bus: Bus;
  log: Logger;
  metrics: BrokerMetrics;
  connections: ConnectionRegistry;
  directory: Directory;
  pool: Pool;
  rows: NodeRows;
}

export interface Sessions {
  gateway: Gateway;
  /** A session left for good: everything the rows hold for it on this node ends with it. */
  sessionEnded(meshId: string, sessionId: string): Promise<void>;
  /** Closes every socket of a revoked member on this node (4403) and ends its sessions; how many sockets. */
  endMemberSessions(memberId: number): Promise<number>;
  /** Its sessions ended on every node: the bus, the re-read of revocations, the admin's report. */
  revocations: Revocations;
}

/** Every row's frames, and `ping` → `pong` (a peer's check of the path to its node, end to end). */
function createRouter(rows: NodeRows): Router {
  const router = new Router();
  rows.set.serveFrames(router);
  router.on('ping', pingFrame, async () => ({ type: 'pong', ts: Date.now() }));
  return router;
}

function createGateway(options: SessionsOptions): Gateway {
  const { config, bus, log, metrics, connections, rows } = options;
  const sessionHooks = rows.set.sessionHooks;
  return new Gateway({
    nodeId: config.nodeId,
    heartbeatMs: config.heartbeatMs,
    admission: new HelloAdmission({
      directory: options.directory,
      presence: rows.presence,
      skewMs: config.helloSkewMs,
    }),
    presence: rows.presence,
    cap: rows.cap,
    connections,
    router: createRouter(rows),
    metrics,
    log,
    pendingPerAddress: config.helloPendingPerAddress,
    frameRate: { perSec: config.frameRatePerSec, burst: config.frameBurst },
    openFeed: (connection, memberId) =>
      new SessionFeed(
        memberId,
        connection,
        rows.messages,
        (path, count) => metrics.deliveries.inc({ path }, count),
        connection.log,
      ),
    onSessionStart: async (connection: Connection) => {
      const identity = connection.identity!;
      // Subscribe to the mesh's channel before anything of the session can be published (ref-counted).
      bus.joinMesh(identity.meshId);
      for (const hooks of sessionHooks) await hooks.started?.(identity);
    },
    onSocketClosed: async (identity) => {
      for (const hooks of sessionHooks) await hooks.socketClosed?.(identity);
    },
    onConnectionGone: (identity) => bus.leaveMesh(identity.meshId),
  });
}

export function createSessions(options: SessionsOptions): Sessions {
  const { bus, log, connections, rows } = options;
  const gateway = createGateway(options);
  const sessionHooks = rows.set.sessionHooks;

  const sessionEnded = async (meshId: string, sessionId: string) => {
    try {
      for (const hooks of sessionHooks) await hooks.ended?.(meshId, sessionId);
    } catch (error) {
      log.warn({ err: error, sessionId }, 'cleaning up after a session failed');
    }
  };

  const endMemberSessions = async (memberId: number) => {
    const sockets = [...connections.ofMember(memberId)];
    // Every socket is marked first (no frame of any is handled from here on), then each is closed.
    for (const connection of sockets) connection.revoke();
    for (const connection of sockets) if (connection.identity) await rows.presence.leave(connection.identity);
    // Sessions of the member in their grace period have no socket to close: they end too.
    await rows.presence.leaveMember(memberId);
    return sockets.length;
  };
  const revocations = createRevocations({
    nodeId: options.config.nodeId,
    bus,
    pool: options.pool,
    directory: options.directory,
    log,
    recheckMs: options.config.revocationRecheckMs,
    hasLocalSessions: (memberId) => connections.hasMember(memberId),
    endMemberSessions,
  });

  return { gateway, sessionEnded, endMemberSessions, revocations };
}
