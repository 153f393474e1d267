/**
 * What the node offers its rows: infrastructure and the sinks to its sockets. A row names the services it
 * uses (`uses` in its definition, broker/rows/row.ts) and its `build` receives those and nothing else.
 */

import type { PeerJoined, PeerLeft, PeerStatus, StreamData, StreamGap } from '../../protocol/frames.js';
import type { Bus } from '../bus/bus.js';
import type { BrokerConfig } from '../config.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import type { Pool } from '../db/pool.js';
import type { Directory } from '../identity/directory.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import type { RedisClient } from '../redis/clients.js';
import type { RedisGuard } from '../redis/guard.js';

/**
 * The sinks' frame types live here, with the sinks, rather than in the presence and streams rows that emit
 * them: the row framework sits below the rows, and the node hands these sinks to every row.
 */
export type PresenceFrame = PeerJoined | PeerLeft | PeerStatus;
/** Where presence events go: the node fans them out to sockets (and audits what it originates). */
export type PresenceEvents = (meshId: string, frame: PresenceFrame) => void;
/** Stream data (and gap notices) for this node's subscribed sessions (one inbound path, one serialization per frame). */
export type StreamSink = (sessionIds: Iterable<string>, frame: StreamData | StreamGap) => void;

/** What the rows deliver through: the node's sockets, reached by session or by mesh. */
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

export interface NodeServices {
  config: BrokerConfig;
  pool: Pool;
  /** DATABASE_READ_URL's pool (or `pool`): only the regions row hands it out, for list reads. */
  readPool: Pool;
  log: Logger;
  metrics: BrokerMetrics;
  connections: ConnectionRegistry;
  /** Meshes and members (the admin API's and the hello's directory). */
  directory: Directory;
  sinks: Sinks;
  /** The Redis of the shared counters (rate limits, cap, nonces): REDIS_COUNTERS_URL's, else the node's. */
  redis: RedisClient;
  /** Whether to try Redis now on a peer's path (see redis/guard.ts). */
  redisGuard: RedisGuard;
  bus: Bus;
}

export type ServiceName = keyof NodeServices;
