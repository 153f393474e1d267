/**
 * Broker configuration, read from the environment once at start and validated. A bad value stops the
 * node with a message that names the variable, before anything is opened.
 */
import { hostname } from 'node:os';
import { join } from 'node:path';
import { defaultFlagsDir } from '../flags/file-store.js';
import { packageRoot } from './paths.js';
import { activePlant, type PlantName, PlantRefused, type RegressionName } from './plants.js';
import { parseRedisClusterNodes, type RedisClusterNode } from './redis/cluster-nodes.js';
import { readConfigFile, withSecretFiles } from './secrets/files.js';
import { redactUrl } from './secrets/redact.js';

export interface BrokerConfig {
  databaseUrl: string;
  /**
   * How long a starting node waits for Postgres to answer (a container started before its database),
   * logging every retry; past it the node exits 1. 0: one attempt.
   */
  startupDbWaitMs: number;
  /**
   * MIGRATE_ON_START (default off): a dev convenience, the node applies the migrations itself before it
   * starts. Off, the node runs no DDL and refuses to start on a database whose migrations are behind its
   * release (`workbench migrate`, as the owner role, applies them: docs/design.md § Database roles).
   */
  migrateOnStart: boolean;
  redisUrl: string;
  /** Prefix of every Redis key this node writes, so several clusters can share one Redis. */
  redisKeyPrefix: string;
  /**
   * Seed nodes of a Redis Cluster (REDIS_CLUSTER_NODES); set, the node uses the cluster instead of REDIS_URL's
   * single Redis (sharded pub/sub, hash-tagged keys: docs/redis-cluster.md).
   */
  redisClusterNodes: RedisClusterNode[] | undefined;
  /**
   * How a node proves itself to Redis and checks Redis (docs/design.md § Redis access): the CA that signs a
   * `rediss://` server's certificate (REDIS_TLS_CA_FILE, PEM; unset: the system's CAs), and a Redis
   * Cluster's ACL user, password and TLS (REDIS_CLUSTER_USERNAME, REDIS_CLUSTER_PASSWORD, REDIS_CLUSTER_TLS;
   * a single Redis carries them in its URL: rediss://user:password@host:port).
   */
  redisTlsCa: string | undefined;
  redisClusterAuth: { username?: string; password?: string; tls: boolean };
  /**
   * Multi-region (docs/multi-region.md), every field absent or equal to the single-region value when the
   * variables are unset: this node's region (REGION), the region whose nodes take a mesh with no home region
   * of its own (PRIMARY_REGION), the read pool's database (DATABASE_READ_URL, default DATABASE_URL), the other
   * regions' Redis the bus also publishes to (REDIS_REMOTE_URLS), and the Redis of the shared counters
   * (REDIS_COUNTERS_URL, default REDIS_URL).
   */
  region: string | undefined;
  primaryRegion: string | undefined;
  databaseReadUrl: string;
  redisRemoteUrls: string[];
  redisCountersUrl: string;
  /**
   * The cluster's bus secret (BUS_SECRET, at least 32 characters): every bus envelope is sealed with it and
   * one a node cannot open with it (or with `busSecretPrevious`) is dropped (docs/design.md § The bus
   * envelope). Required on every node: each one opens Redis and listens on the bus, and any `ha.*` row that
   * uses it can be switched on at run time.
   */
  busSecret: string;
  /** During a rotation only: the secret being retired, still accepted on receipt, never used to seal. */
  busSecretPrevious: string | undefined;
  host: string;
  port: number;
  nodeId: string;
  adminToken: string;
  /**
   * During a rotation only: the token being retired, accepted alongside `adminToken` (each use counted and
   * logged, so the operator sees when nothing sends it any more). Unset otherwise.
   */
  adminTokenPrevious: string | undefined;
  logLevel: string;
  /** Largest WebSocket frame accepted; a larger one closes the socket with 1009. */
  maxFrameBytes: number;
  /** Largest message body accepted by `send`. */
  maxBodyBytes: number;
  /** Allowed clock skew of a hello's `ts`, and how long its nonce is remembered. */
  helloSkewMs: number;
  /** How long a disconnected session keeps its presence before `peer.left`. */
  presenceGraceMs: number;
  /** How often a node re-reads revocations from Postgres (broker/identity/revocation-watch.ts). */
  revocationRecheckMs: number;
  /** Heartbeat interval announced in `welcome`; also the node heartbeat period. */
  heartbeatMs: number;
  /** How long SIGTERM waits for in-flight work before the process exits anyway. */
  drainTimeoutMs: number;
  /** Most sockets a drain closes a second (0: all at once); all are closed within half the drain timeout. */
  drainClosePerSec: number;
  /** Most sessions one mesh may hold; one more is closed with 4408. */
  meshConnectionCap: number;
  sendRatePerMin: number;
  sendBurst: number;
  hookRatePerMin: number;
  /** Real time between two ticks of a mesh clock. */
  clockTickMs: number;
  mcpCallTimeoutMs: number;
  scheduleMaxPerMember: number;
  /** Allow URL watches on private, loopback and link-local addresses (off: refused as `forbidden`). */
  watchAllowPrivate: boolean;
  watchFetchTimeoutMs: number;
  watchMaxBytes: number;
  watchMaxPerMember: number;
  watchMaxPerMesh: number;
  /** The environment this node belongs to: names its flags file and its Unleash environment. */
  flagsEnv: string;
  flagsProvider: 'file' | 'unleash';
  /** Folder of the `<env>.json` flags files. */
  flagsDir: string;
  /** Backstop poll of the flags file. */
  flagsPollMs: number;
  unleashUrl: string | undefined;
  unleashToken: string | undefined;
  unleashRefreshMs: number;
  /** The project's state folder (Unleash backups and the like); never the system temp dir. */
  stateDir: string;
  /** Shared delivery: how often every session's feed is compared with its member's last seq. */
  deliveryCheckMs: number;
  /** Unacked messages a member may be owed (a DM past it is refused, a broadcast skips the member). */
  backlogMax: number;
  /** An unacked message older than this is expired (no longer owed). */
  backlogMaxAgeMs: number;
  /** A message nobody is owed any more is removed this long after it was accepted (the idempotency window). */
  messageRetentionMs: number;
  /** How often retention runs (on one node at a time). */
  retentionIntervalMs: number;
  /** A Redis call on a peer's path waits at most this long, then falls back (rate limits, nonces, cap). */
  redisTimeoutMs: number;
  /** A node whose heartbeat is older than this is dead (its sessions are reaped, its parts expire). */
  nodeDeadMs: number;
  /** Shared schedules: how often every node looks for due occurrences. */
  schedulePollMs: number;
  /** Phase 1: how long the active lease lasts (a standby takes over within about this after a kill). */
  activeLeaseTtlMs: number;
  /** MCP servers one member may host at once (its sessions together); one more is `limit_exceeded`. */
  mcpMaxServersPerMember: number;
  /** MCP servers one mesh may hold at once. */
  mcpMaxServersPerMesh: number;
  /** Tools over all of one member's MCP servers. */
  mcpMaxToolsPerMember: number;
  /** Tools over all of one mesh's MCP servers. */
  mcpMaxToolsPerMesh: number;
  /** Stream subscriptions one session may hold. */
  streamMaxSubscriptionsPerSession: number;
  /** Offsets, epochs and history for streams (off: at most once without positions, for the bench). */
  streamPositions: boolean;
  /** The publishes one stream's history keeps (the newest). */
  streamHistorySize: number;
  /** How long a publish stays in its stream's history. */
  streamHistoryTtlMs: number;
  /** The bytes one stream's history may hold (in Redis with `ha.streams`, in memory without). */
  streamHistoryBytes: number;
  /** The bytes every stream history in this node's memory may hold together (the local row). */
  streamHistoryNodeBytes: number;
  /** How often a node compares the tops of its subscribed streams with what it delivered (a lost last publish). */
  streamPositionCheckMs: number;
  /** Sockets from one source address that have not said hello yet; one more is closed at once (4429). */
  helloPendingPerAddress: number;
  /** Frames per second one socket may have handled; faster senders are paced (their socket is not read). */
  frameRatePerSec: number;
  /** Frames a socket may send at once above its rate before it is paced. */
  frameBurst: number;
  /**
   * A planted bug or regression, tests only (WORKBENCH_PLANT with WORKBENCH_TEST_PLANTS=1; docs/chaos.md
   * § Planted bugs, docs/promotion.md § Analysis).
   */
  plant?: PlantName | RegressionName;
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

function str(env: Env, name: string, fallback?: string): string {
  const value = env[name];
  if (value === undefined || value === '') {
    if (fallback === undefined) throw new ConfigError(name, 'is required but not set');
    return fallback;
  }
  return value;
}

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(name, `must be a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max)
    throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function url(env: Env, name: string, fallback: string, protocols: string[]): string {
  const value = str(env, name, fallback);
  let parsed: URL;
  try {
    parsed = new URL(value);
  } catch {
    throw new ConfigError(name, `is not a URL: "${redactUrl(value)}"`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(name, `must use ${protocols.join(' or ')}, got "${parsed.protocol}"`);
  }
  return value;
}

/** Stream positions and history (issue 28; docs/protocol.md § Streams). */
function streamPositionSettings(env: Env) {
  return {
    streamPositions: bool(env, 'STREAM_POSITIONS', true),
    streamHistorySize: int(env, 'STREAM_HISTORY_SIZE', 1000, 1, 100_000),
    streamHistoryTtlMs: int(env, 'STREAM_HISTORY_TTL_MS', 300_000, 1000, 86_400_000),
    streamHistoryBytes: int(env, 'STREAM_HISTORY_BYTES', 1024 * 1024, 1024, 64 * 1024 * 1024),
    streamHistoryNodeBytes: int(env, 'STREAM_HISTORY_NODE_BYTES', 64 * 1024 * 1024, 1024, 4 * 1024 ** 3),
    streamPositionCheckMs: int(env, 'STREAM_POSITION_CHECK_MS', 1000, 50, 600_000),
  };
}

function bool(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (['1', 'true', 'yes', 'on'].includes(raw.toLowerCase())) return true;
  if (['0', 'false', 'no', 'off'].includes(raw.toLowerCase())) return false;
  throw new ConfigError(name, `must be true or false, got "${raw}"`);
}

function clusterNodes(env: Env): RedisClusterNode[] | undefined {
  const raw = env.REDIS_CLUSTER_NODES;
  if (raw === undefined) return undefined;
  try {
    return parseRedisClusterNodes(raw);
  } catch (error) {
    throw new ConfigError('REDIS_CLUSTER_NODES', (error as Error).message);
  }
}

const REGION_NAME = /^[a-z0-9-]{1,32}$/;

function regionName(env: Env, name: string): string | undefined {
  const value = env[name];
  if (value === undefined || value === '') return undefined;
  if (!REGION_NAME.test(value))
    throw new ConfigError(name, `must be 1-32 characters of a-z, 0-9 or "-", got "${value}"`);
  return value;
}

/** REDIS_REMOTE_URLS: comma-separated redis:// URLs, none empty, none twice, none the local REDIS_URL. */
function remoteRedisUrls(env: Env, localUrl: string): string[] {
  const raw = env.REDIS_REMOTE_URLS;
  if (raw === undefined || raw === '') return [];
  const urls = raw.split(',').map((entry) => entry.trim());
  for (const [index, entry] of urls.entries()) {
    if (entry === '') throw new ConfigError('REDIS_REMOTE_URLS', `entry ${index + 1} is empty ("${raw}")`);
    let parsed: URL;
    try {
      parsed = new URL(entry);
    } catch {
      throw new ConfigError('REDIS_REMOTE_URLS', `entry ${index + 1} is not a URL: "${redactUrl(entry)}"`);
    }
    if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:')
      throw new ConfigError(
        'REDIS_REMOTE_URLS',
        `entry ${index + 1} must use redis: or rediss:, got "${redactUrl(entry)}"`,
      );
    if (entry === localUrl)
      throw new ConfigError(
        'REDIS_REMOTE_URLS',
        `lists REDIS_URL itself (${redactUrl(entry)}): every node of this region would hear each message twice`,
      );
  }
  if (new Set(urls).size !== urls.length) throw new ConfigError('REDIS_REMOTE_URLS', 'lists a URL twice');
  return urls;
}

/**
 * The combinations of the multi-region variables that make no sense, or that this build does not do,
 * refused before anything is opened (each message names the variables).
 */
function checkRegionCombinations(env: Env, region: string | undefined, remotes: string[]): void {
  const set = (name: string) => env[name] !== undefined && env[name] !== '';
  if (remotes.length > 0 && region === undefined)
    throw new ConfigError(
      'REDIS_REMOTE_URLS',
      'needs REGION (the other regions are the remotes of this one)',
    );
  if (set('PRIMARY_REGION') && region === undefined)
    throw new ConfigError('PRIMARY_REGION', 'needs REGION (a node without a region has no home to compare)');
  if (env.REDIS_CLUSTER_NODES !== undefined) {
    // A remote region's nodes subscribe on their own Redis; over clusters the publish would have to be a
    // sharded one on each remote cluster, and the counters a cluster client too: not built.
    for (const name of ['REDIS_REMOTE_URLS', 'REDIS_COUNTERS_URL'])
      if (set(name))
        throw new ConfigError(
          name,
          'cannot be combined with REDIS_CLUSTER_NODES (multi-region over Redis Clusters is not built: docs/multi-region.md)',
        );
  }
}

/** A CA certificate bundle larger than this is not one. */
const MAX_CA_FILE_BYTES = 1024 * 1024;

/** REDIS_TLS_CA_FILE and a Redis Cluster's credentials (BrokerConfig.redisTlsCa, redisClusterAuth). */
function redisSecurity(env: Env) {
  const fail = (variable: string, message: string) => new ConfigError(variable, message);
  const caFile = env.REDIS_TLS_CA_FILE;
  const redisTlsCa =
    caFile === undefined || caFile === ''
      ? undefined
      : readConfigFile(caFile, 'REDIS_TLS_CA_FILE', fail, MAX_CA_FILE_BYTES);
  if (redisTlsCa !== undefined && !redisTlsCa.includes('-----BEGIN CERTIFICATE-----'))
    throw new ConfigError('REDIS_TLS_CA_FILE', `${caFile} holds no PEM certificate`);
  const username = env.REDIS_CLUSTER_USERNAME || undefined;
  const password = env.REDIS_CLUSTER_PASSWORD || undefined;
  if (username !== undefined && password === undefined)
    throw new ConfigError(
      'REDIS_CLUSTER_USERNAME',
      'needs REDIS_CLUSTER_PASSWORD (or REDIS_CLUSTER_PASSWORD_FILE)',
    );
  const tls = bool(env, 'REDIS_CLUSTER_TLS', false);
  return { redisTlsCa, redisClusterAuth: { username, password, tls } };
}

/** Shortest BUS_SECRET accepted: 32 characters (e.g. `openssl rand -hex 32` gives 64). */
export const BUS_SECRET_MIN_LENGTH = 32;

/** BUS_SECRET and BUS_SECRET_PREVIOUS; the messages never show a value. */
function busSecrets(env: Env) {
  const busSecret = str(env, 'BUS_SECRET', '');
  if (busSecret === '')
    throw new ConfigError(
      'BUS_SECRET',
      'is required: the secret the cluster signs its bus messages with, the same on every node (at least 32 characters, e.g. `openssl rand -hex 32`)',
    );
  if (busSecret.length < BUS_SECRET_MIN_LENGTH)
    throw new ConfigError('BUS_SECRET', `must be at least ${BUS_SECRET_MIN_LENGTH} characters long`);
  const busSecretPrevious = env.BUS_SECRET_PREVIOUS || undefined;
  if (busSecretPrevious !== undefined && busSecretPrevious.length < BUS_SECRET_MIN_LENGTH)
    throw new ConfigError('BUS_SECRET_PREVIOUS', `must be at least ${BUS_SECRET_MIN_LENGTH} characters long`);
  if (busSecretPrevious === busSecret)
    throw new ConfigError(
      'BUS_SECRET_PREVIOUS',
      'is the same as BUS_SECRET (set it to the secret being retired)',
    );
  return { busSecret, busSecretPrevious };
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** Where the node listens and who may administer it, checked in this order. */
function nodeAndAccess(env: Env) {
  const port = int(env, 'PORT', 8080, 0, 65535);
  const nodeId = str(env, 'NODE_ID', `${hostname()}-${port}`);
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(nodeId)) {
    throw new ConfigError('NODE_ID', 'must be 1-64 characters of letters, digits, ".", "_" or "-"');
  }
  const adminToken = str(env, 'ADMIN_TOKEN');
  if (adminToken.length < 16) throw new ConfigError('ADMIN_TOKEN', 'must be at least 16 characters long');
  const adminTokenPrevious = env.ADMIN_TOKEN_PREVIOUS || undefined;
  if (adminTokenPrevious !== undefined && adminTokenPrevious.length < 16)
    throw new ConfigError('ADMIN_TOKEN_PREVIOUS', 'must be at least 16 characters long');
  if (adminTokenPrevious === adminToken)
    throw new ConfigError(
      'ADMIN_TOKEN_PREVIOUS',
      'is the same as ADMIN_TOKEN (set it to the token being retired)',
    );
  const logLevel = str(env, 'LOG_LEVEL', 'info');
  if (!LOG_LEVELS.includes(logLevel))
    throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}`);
  return { port, nodeId, adminToken, adminTokenPrevious, logLevel };
}

/** Where the node reads its flags, checked in this order. */
function flagSource(env: Env) {
  const flagsEnv = str(env, 'FLAGS_ENV', 'local');
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(flagsEnv))
    throw new ConfigError('FLAGS_ENV', 'must be 1-64 letters, digits, "_" or "-"');
  const flagsProvider = str(env, 'FLAGS_PROVIDER', 'file');
  if (flagsProvider !== 'file' && flagsProvider !== 'unleash') {
    throw new ConfigError('FLAGS_PROVIDER', `must be "file" or "unleash", got "${flagsProvider}"`);
  }
  const unleashUrl = env.UNLEASH_URL ? url(env, 'UNLEASH_URL', '', ['http:', 'https:']) : undefined;
  if (flagsProvider === 'unleash' && !unleashUrl)
    throw new ConfigError('UNLEASH_URL', 'is required with FLAGS_PROVIDER=unleash');
  return { flagsEnv, flagsProvider, unleashUrl } as const;
}

/** URL watches: what a watch may fetch, and how many a member and a mesh may hold. */
function watchSettings(env: Env) {
  return {
    watchAllowPrivate: bool(env, 'WATCH_ALLOW_PRIVATE', false),
    watchFetchTimeoutMs: int(env, 'WATCH_FETCH_TIMEOUT_MS', 10_000, 100, 120_000),
    watchMaxBytes: int(env, 'WATCH_MAX_BYTES', 1024 * 1024, 1024, 64 * 1024 * 1024),
    watchMaxPerMember: int(env, 'WATCH_MAX_PER_MEMBER', 20, 1, 100_000),
    watchMaxPerMesh: int(env, 'WATCH_MAX_PER_MESH', 200, 1, 1_000_000),
  } as const;
}

const POSTGRES = ['postgres:', 'postgresql:'];

/** Every variable the broker reads, with its default; the README's configuration table mirrors this. */
export function loadConfig(given: Env = process.env): BrokerConfig {
  const env = withSecretFiles(given, (variable, message) => new ConfigError(variable, message));
  const { port, nodeId, adminToken, adminTokenPrevious, logLevel } = nodeAndAccess(env);
  const { flagsEnv, flagsProvider, unleashUrl } = flagSource(env);
  const heartbeatMs = int(env, 'HEARTBEAT_MS', 15_000, 100, 300_000);
  const maxFrameBytes = int(env, 'MAX_FRAME_BYTES', 64 * 1024, 1024, 16 * 1024 * 1024);
  const databaseUrl = url(env, 'DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/meshbroker', POSTGRES);
  const redisUrl = url(env, 'REDIS_URL', 'redis://127.0.0.1:6379', ['redis:', 'rediss:']);
  const region = regionName(env, 'REGION');
  const redisRemoteUrls = remoteRedisUrls(env, redisUrl);
  checkRegionCombinations(env, region, redisRemoteUrls);
  return {
    ...busSecrets(env),
    databaseUrl,
    region,
    primaryRegion: regionName(env, 'PRIMARY_REGION'),
    databaseReadUrl: url(env, 'DATABASE_READ_URL', databaseUrl, POSTGRES),
    redisRemoteUrls,
    redisCountersUrl: url(env, 'REDIS_COUNTERS_URL', redisUrl, ['redis:', 'rediss:']),
    startupDbWaitMs: int(env, 'STARTUP_DB_WAIT_MS', 60_000, 0, 3_600_000),
    migrateOnStart: bool(env, 'MIGRATE_ON_START', false),
    redisUrl,
    redisKeyPrefix: str(env, 'REDIS_KEY_PREFIX', 'mesh:'),
    redisClusterNodes: clusterNodes(env),
    ...redisSecurity(env),
    host: str(env, 'HOST', '127.0.0.1'),
    port,
    nodeId,
    adminToken,
    adminTokenPrevious,
    logLevel,
    maxFrameBytes,
    maxBodyBytes: int(env, 'MAX_BODY_BYTES', Math.min(32 * 1024, maxFrameBytes), 1, maxFrameBytes),
    helloSkewMs: int(env, 'HELLO_SKEW_MS', 60_000, 1000, 600_000),
    presenceGraceMs: int(env, 'PRESENCE_GRACE_MS', 30_000, 0, 3_600_000),
    revocationRecheckMs: int(env, 'REVOCATION_RECHECK_MS', 500, 50, 60_000),
    heartbeatMs,
    drainTimeoutMs: int(env, 'DRAIN_TIMEOUT_MS', 8_000, 0, 60_000),
    drainClosePerSec: int(env, 'DRAIN_CLOSE_PER_SEC', 500, 0, 1_000_000),
    meshConnectionCap: int(env, 'MESH_CONNECTION_CAP', 100, 1, 1_000_000),
    sendRatePerMin: int(env, 'SEND_RATE_PER_MIN', 60, 1, 1_000_000),
    sendBurst: int(env, 'SEND_BURST', 10, 1, 1_000_000),
    hookRatePerMin: int(env, 'HOOK_RATE_PER_MIN', 30, 1, 1_000_000),
    clockTickMs: int(env, 'CLOCK_TICK_MS', 1000, 50, 60_000),
    mcpCallTimeoutMs: int(env, 'MCP_CALL_TIMEOUT_MS', 30_000, 100, 600_000),
    scheduleMaxPerMember: int(env, 'SCHEDULE_MAX_PER_MEMBER', 100, 1, 100_000),
    ...watchSettings(env),
    flagsEnv,
    flagsProvider,
    flagsDir: str(env, 'FLAGS_DIR', defaultFlagsDir(packageRoot())),
    flagsPollMs: int(env, 'FLAGS_POLL_MS', 5000, 100, 3_600_000),
    unleashUrl,
    unleashToken: env.UNLEASH_API_TOKEN || undefined,
    unleashRefreshMs: int(env, 'UNLEASH_REFRESH_MS', 15_000, 100, 3_600_000),
    stateDir: str(env, 'STATE_DIR', join(packageRoot(), '.workbench')),
    deliveryCheckMs: int(env, 'DELIVERY_CHECK_MS', 5000, 50, 3_600_000),
    backlogMax: int(env, 'BACKLOG_MAX', 10_000, 1, 10_000_000),
    backlogMaxAgeMs: int(env, 'BACKLOG_MAX_AGE_MS', 7 * 86_400_000, 1000, 365 * 86_400_000),
    messageRetentionMs: int(env, 'MESSAGE_RETENTION_MS', 86_400_000, 1000, 365 * 86_400_000),
    retentionIntervalMs: int(env, 'RETENTION_INTERVAL_MS', 10_000, 100, 3_600_000),
    redisTimeoutMs: int(env, 'REDIS_TIMEOUT_MS', 250, 10, 60_000),
    nodeDeadMs: int(env, 'NODE_DEAD_MS', 0, 0, 3_600_000) || 3 * heartbeatMs,
    schedulePollMs: int(env, 'SCHEDULE_POLL_MS', 500, 20, 60_000),
    activeLeaseTtlMs: int(env, 'ACTIVE_LEASE_TTL_MS', 2000, 200, 600_000),
    mcpMaxServersPerMember: int(env, 'MCP_MAX_SERVERS_PER_MEMBER', 20, 1, 100_000),
    mcpMaxServersPerMesh: int(env, 'MCP_MAX_SERVERS_PER_MESH', 200, 1, 1_000_000),
    mcpMaxToolsPerMember: int(env, 'MCP_MAX_TOOLS_PER_MEMBER', 500, 1, 1_000_000),
    mcpMaxToolsPerMesh: int(env, 'MCP_MAX_TOOLS_PER_MESH', 5000, 1, 10_000_000),
    streamMaxSubscriptionsPerSession: int(env, 'STREAM_MAX_SUBSCRIPTIONS_PER_SESSION', 100, 1, 100_000),
    ...streamPositionSettings(env),
    helloPendingPerAddress: int(env, 'HELLO_PENDING_PER_ADDRESS', 256, 1, 1_000_000),
    frameRatePerSec: int(env, 'FRAME_RATE_PER_SEC', 1000, 1, 10_000_000),
    frameBurst: int(env, 'FRAME_BURST', 2000, 1, 10_000_000),
    plant: testPlant(env),
  };
}

/** A planted bug for the chaos tests (broker/plants.ts): refused, as bad configuration, outside them. */
function testPlant(env: Env): PlantName | RegressionName | undefined {
  try {
    return activePlant(env);
  } catch (error) {
    if (error instanceof PlantRefused) throw new ConfigError(error.variable, error.message);
    throw error;
  }
}
