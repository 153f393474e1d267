/**
 * The peer side of a node: the router with every row's frames, and the gateway whose session life runs
 * the rows' session hooks in row order. Also ends a revoked member's sessions, here and on every node.
 */

import { CloseCode } from '../../protocol/errors.js';
import { pingFrame } from '../../protocol/requests.js';
import { registerAuditFrames } from '../audit/frames.js';
import type { Bus } from '../bus/bus.js';
import { registerClockFrames } from '../clock/frames.js';
import type { BrokerConfig } from '../config.js';
import type { Connection } from '../connections/connection.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import type { Pool } from '../db/pool.js';
import { SessionFeed } from '../delivery/feed.js';
import { registerMessaging } from '../delivery/messaging.js';
import type { MessageStore } from '../delivery/store.js';
import { HelloAdmission } from '../hello/admission.js';
import type { Directory } from '../identity/directory.js';
import type { Logger } from '../log.js';
import { registerMcpFrames } from '../mcp/frames.js';
import type { BrokerMetrics } from '../metrics.js';
import type { StateModules } from '../modules.js';
import { registerPresenceFrames } from '../presence/frames.js';
import type { SessionHooks } from '../rows/row.js';
import { registerScheduleFrames } from '../schedules/frames.js';
import type { ScheduleStore } from '../schedules/store.js';
import { registerStreamFrames } from '../streams/frames.js';
import { registerWatchFrames } from '../watches/frames.js';
import type { WatchStore } from '../watches/store.js';
import { Gateway } from '../ws/gateway.js';
import { Router } from '../ws/router.js';

export interface SessionsOptions {
  config: BrokerConfig;
  pool: Pool;
  bus: Bus;
  log: Logger;
  metrics: BrokerMetrics;
  connections: ConnectionRegistry;
  directory: Directory;
  messages: MessageStore;
  schedules: ScheduleStore;
  watchStore: WatchStore;
  modules: StateModules;
  sessionHooks: SessionHooks[];
}

export interface Sessions {
  gateway: Gateway;
  /** A session left for good: everything the rows hold for it on this node ends with it. */
  sessionEnded(meshId: string, sessionId: string): Promise<void>;
  /** Closes every socket of a revoked member on this node (4403) and ends its sessions. */
  endMemberSessions(memberId: number): Promise<void>;
}

export function createSessions(options: SessionsOptions): Sessions {
  const { config, bus, log, metrics, connections, modules, sessionHooks } = options;
  const router = new Router();
  registerMessaging(router, {
    store: options.messages,
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
    store: options.schedules,
    lists: modules.regions,
    scheduler: modules.scheduler,
    directory: options.directory,
    audit: modules.audit,
    maxPerMember: config.scheduleMaxPerMember,
    maxBodyBytes: config.maxBodyBytes,
  });
  registerWatchFrames(router, {
    store: options.watchStore,
    lists: modules.regions,
    runner: modules.watches,
    audit: modules.audit,
    nodeId: config.nodeId,
    limits: { perMember: config.watchMaxPerMember, perMesh: config.watchMaxPerMesh },
    allowPrivate: config.watchAllowPrivate,
  });
  registerAuditFrames(router, options.pool, modules.audit, modules.regions);
  // `ping` → `pong`: lets a peer check the path to its node end to end.
  router.on('ping', pingFrame, async () => ({ type: 'pong', ts: Date.now() }));

  const gateway = new Gateway({
    nodeId: config.nodeId,
    heartbeatMs: config.heartbeatMs,
    admission: new HelloAdmission({
      directory: options.directory,
      presence: modules.presence,
      skewMs: config.helloSkewMs,
    }),
    presence: modules.presence,
    cap: modules.cap,
    connections,
    router,
    metrics,
    log,
    pendingPerAddress: config.helloPendingPerAddress,
    frameRate: { perSec: config.frameRatePerSec, burst: config.frameBurst },
    openFeed: (connection, memberId) =>
      new SessionFeed(
        memberId,
        connection,
        options.messages,
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
      if (connection.identity) await modules.presence.leave(connection.identity);
    }
    // Sessions of the member in their grace period have no socket to close: they end too.
    await modules.presence.leaveMember(memberId);
  };
  bus.on('member.revoked', (_meshId, { memberId }) => {
    endMemberSessions(memberId).catch((error) => log.warn({ err: error }, 'ending revoked sessions failed'));
  });

  return { gateway, sessionEnded, endMemberSessions };
}
