/**
 * The peer side of a node: the router with every row's frames, and the gateway whose session life runs
 * the rows' session hooks in row order. Also ends a revoked member's sessions, here and on every node.
 */

import { CloseCode } from '../../protocol/errors.js';
import { pingFrame } from '../../protocol/requests.js';
import type { Bus } from '../bus/bus.js';
import type { BrokerConfig } from '../config.js';
import type { Connection } from '../connections/connection.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import { SessionFeed } from '../delivery/feed.js';
import { HelloAdmission } from '../hello/admission.js';
import type { Directory } from '../identity/directory.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import type { NodeRows } from '../modules.js';
import { Gateway } from '../ws/gateway.js';
import { Router } from '../ws/router.js';

export interface SessionsOptions {
  config: BrokerConfig;
  bus: Bus;
  log: Logger;
  metrics: BrokerMetrics;
  connections: ConnectionRegistry;
  directory: Directory;
  rows: NodeRows;
}

export interface Sessions {
  gateway: Gateway;
  /** A session left for good: everything the rows hold for it on this node ends with it. */
  sessionEnded(meshId: string, sessionId: string): Promise<void>;
  /** Closes every socket of a revoked member on this node (4403) and ends its sessions. */
  endMemberSessions(memberId: number): Promise<void>;
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
    for (const connection of [...connections.ofMember(memberId)]) {
      connection.close(CloseCode.memberRevoked, 'member revoked');
      if (connection.identity) await rows.presence.leave(connection.identity);
    }
    // Sessions of the member in their grace period have no socket to close: they end too.
    await rows.presence.leaveMember(memberId);
  };
  // Over the bus a revocation is a hint: its sessions end only once Postgres shows the member of that mesh
  // revoked (the admin API wrote it before publishing), so a forged or misdirected one closes nothing.
  bus.on('member.revoked', (meshId, { memberId }) => {
    void (async () => {
      if (!(await options.directory.isRevoked(meshId, memberId))) {
        log.warn(
          { meshId, memberId },
          'member.revoked over the bus for a member Postgres does not show revoked: ignored',
        );
        return;
      }
      await endMemberSessions(memberId);
    })().catch((error) => log.warn({ err: error }, 'ending revoked sessions failed'));
  });

  return { gateway, sessionEnded, endMemberSessions };
}
