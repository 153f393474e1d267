/**
 * The composition root of a broker node: infrastructure (node/infrastructure.ts), the state rows
 * (modules.ts: each row wires itself from its folder) moved by the flags, the peer side (node/sessions.ts)
 * and the HTTP side (node/http.ts), started in one ordered list and stopped in its reverse (node/steps.ts).
 */
import type { FastifyInstance } from 'fastify';
import type { BrokerConfig } from './config.js';
import { ConnectionRegistry } from './connections/registry.js';
import type { NodeLifecycle } from './http/health.js';
import { Directory } from './identity/directory.js';
import { createLogger, type Logger } from './log.js';
import { NodeHeartbeat } from './membership/heartbeat.js';
import { BrokerMetrics } from './metrics.js';
import { createModules } from './modules.js';
import { createNodeFlags, subscribeFlagPushes } from './node/flags.js';
import { createHttp } from './node/http.js';
import { type Infrastructure, openInfrastructure } from './node/infrastructure.js';
import { createSessions } from './node/sessions.js';
import { createSinks, type PresenceFollowUps } from './node/sinks.js';
import { runSteps, StartupError, type Step } from './node/steps.js';
import { armPlant, plantDescription } from './plants.js';
import { RedisGuard } from './redis/guard.js';
import type { RowReconciler } from './rows/reconciler.js';

export { StartupError } from './node/steps.js';

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
  /**
   * Called once the node listens, before its last start steps ran: from here a stop must drain the peers
   * it may already have, so `workbench broker` waits for the start and stops the node rather than exiting.
   */
  onListening?: () => void;
}

/**
 * Starts a node. A start that fails closes everything it had opened before it rejects (database pool,
 * Redis clients, timers, the listening socket), so a process whose start failed ends by itself instead
 * of being kept alive by an open handle.
 */
export async function startBroker(config: BrokerConfig, options: StartOptions = {}): Promise<BrokerNode> {
  const log = options.log ?? createLogger(config.nodeId, config.logLevel);
  armPlant(config.plant);
  if (config.plant)
    log.warn(
      { plant: config.plant },
      `PLANTED BUG ${config.plant} IS ON: ${plantDescription(config.plant)}; tests only, never serve real traffic`,
    );
  const metrics = new BrokerMetrics(config.nodeId);
  let infrastructure: Infrastructure;
  try {
    infrastructure = await openInfrastructure(config, log, metrics);
  } catch (error) {
    throw new StartupError('infrastructure', error);
  }
  try {
    return await assembleNode(config, log, metrics, infrastructure, options.onListening);
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
  onListening: () => void = () => {},
): Promise<BrokerNode> {
  const { pool, readPool, redis, counters, pubsub, bus } = infrastructure;
  const connections = new ConnectionRegistry();
  const directory = new Directory(pool);
  const node = { config, pool, log, metrics, bus, connections, directory };
  // Presence's sinks audit and end sessions through what is built after them.
  const followUps: PresenceFollowUps = {};
  const sinks = createSinks(connections, config.nodeId, followUps);
  const rows = createModules({
    ...node,
    readPool,
    sinks,
    redis: counters,
    redisGuard: new RedisGuard(counters),
  });
  followUps.audit = rows.audit;
  const { reconciler } = rows;
  let heartbeat: NodeHeartbeat | undefined;
  const flags = createNodeFlags({ ...node, reconciler, changed: () => heartbeat?.beatNow() });
  const sessions = createSessions({ ...node, rows });
  followUps.sessionEnded = sessions.sessionEnded;
  let lifecycle: NodeLifecycle = 'starting';
  const app = await createHttp({ ...node, redis, rows, sessions, flags, lifecycle: () => lifecycle });
  let url = '';

  const steps: Step[] = [
    { name: 'infrastructure', stop: () => infrastructure.close() },
    // The first snapshot activates every row (boot), background work where the gate allows it.
    { name: 'rows', start: () => flags.start(), stop: () => reconciler.close() },
    { name: 'flag source', stop: () => flags.close() },
    { name: 'row work', start: async () => rows.set.startNodeWork(), stop: () => rows.set.stopNodeWork() },
    // Each node's re-read of revocations it may have missed (node/revocations.ts).
    {
      name: 'revocation watch',
      start: async () => sessions.revocations.start(),
      stop: () => sessions.revocations.stop(),
    },
    { name: 'flag pushes', start: () => subscribeFlagPushes(pubsub, config, flags, log) },
    {
      name: 'http',
      start: async () => {
        url = (await app.listen({ host: config.host, port: config.port })).replace('[::1]', 'localhost');
        onListening();
      },
      stop: () => app.close(),
    },
    {
      name: 'heartbeat',
      start: async () => {
        const report = () => ({ environment: config.flagsEnv, flags: flags.report() });
        const region = config.region ?? null;
        heartbeat = new NodeHeartbeat(pool, config.nodeId, url, config.heartbeatMs, log, report, region);
        await heartbeat.start();
      },
      stop: async () => heartbeat?.stop(),
    },
    {
      name: 'peers',
      stop: async () => {
        lifecycle = 'draining';
        if (!url) return; // never listened (a failed start): no peer to drain
        log.info('draining: closing every peer with 1001');
        await sessions.gateway.drain(config.drainTimeoutMs, config.drainClosePerSec);
      },
    },
  ];
  const stop = await runSteps(steps, log);
  lifecycle = 'serving';
  log.info({ url, ws: `${url.replace(/^http/, 'ws')}/ws` }, 'broker node listening');
  return { nodeId: config.nodeId, url, app, log, metrics, events: reconciler, stop };
}
