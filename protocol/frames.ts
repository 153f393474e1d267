/**
 * Every frame the broker sends a peer (docs/protocol.md), as TypeScript types: the broker builds them, the
 * peer SDK reads them. Types only (no zod), so the SDK imports this file with `import type` and a browser
 * build of it loads nothing from here.
 *
 * A reply to a request carries the request's `rid` when it had one: the gateway adds it, so the reply
 * types below leave it out (except `welcome` and `error`, which the gateway builds itself).
 */
import type { ErrorCode } from './errors.js';
import type { WatchMode } from './requests.js';

/** Any frame; features without a typed helper in the SDK (streams, clock, …) arrive as this. */
export interface Frame {
  type: string;
  rid?: string;
  [field: string]: unknown;
}

// Session

export interface Welcome {
  type: 'welcome';
  v: 1;
  meshId: string;
  sessionId: string;
  node: string;
  resumed: boolean;
  heartbeatMs: number;
  rid?: string;
}

/** A request that could not be served (the connection stays open). */
export interface ErrorFrame {
  type: 'error';
  code: ErrorCode;
  message: string;
  rid?: string;
}

export interface Pong {
  type: 'pong';
  ts: number;
}

// Durable messages

export interface Sent {
  type: 'sent';
  id: string;
  messageId: string;
  recipients: number;
}

export interface Acked {
  type: 'acked';
  messageId: string;
}

export interface Message {
  type: 'message';
  messageId: string;
  id: string;
  from: string;
  fromSession: string;
  to: string;
  body: string;
  sentAt: string;
  /** Set on an occurrence of a scheduled message. */
  scheduleId?: string;
  occurrence?: number;
  [extra: string]: unknown;
}

/**
 * A watch value too large for a notification (which is at most MAX_BODY_BYTES): its SHA-256 hex, its
 * size in UTF-8 bytes and its beginning (cut on a character boundary).
 */
export interface WatchValueDigest {
  sha256: string;
  bytes: number;
  excerpt: string;
}

/** A durable notification that a URL watch of this member triggered (acked like a message). */
export interface WatchTriggered {
  type: 'watch.triggered';
  messageId: string;
  watchId: string;
  url: string;
  oldValue: string | WatchValueDigest | null;
  newValue: string | WatchValueDigest;
  sentAt: string;
}

/**
 * A frame owed to a member until one of its sessions acks its `messageId`: a `message` or a
 * `watch.triggered` (their other fields as above), as the broker stores, delivers and replays it.
 */
export interface DurableFrame {
  type: 'message' | 'watch.triggered';
  messageId: string;
  sentAt: string;
  [field: string]: unknown;
}

// Presence

/** A session of the mesh, as `peers` lists it. */
export interface Peer {
  pubkey: string;
  sessionId: string;
  name: string | null;
  groups: string[];
  node: string;
  connectedAt: string;
  /** The last status reported for the session (`POST /hook/status`), if any. */
  status: string | null;
}

export interface Peers {
  type: 'peers';
  peers: Peer[];
  /** The cursor of the next page (ask again with `cursor`); absent on the last page. */
  next?: string;
}

export interface PeerJoined {
  type: 'peer.joined';
  pubkey: string;
  sessionId: string;
  name: string | null;
}

export interface PeerLeft {
  type: 'peer.left';
  pubkey: string;
  sessionId: string;
}

export interface PeerStatus {
  type: 'peer.status';
  pubkey: string;
  sessionId: string;
  status: string;
}

// Streams

/** A place in one stream's history: `offset` counts its publishes (+1 each), `epoch` names the history. */
export interface StreamPosition {
  offset: number;
  epoch: string;
}

/**
 * `offset`/`epoch`: the stream's top when subscribed (absent with positions off or unavailable). With a
 * `since`: `recovered` (the missed frames follow as `stream.data`) or not and why (`reason`).
 */
export interface StreamSubscribed {
  type: 'stream.subscribed';
  stream: string;
  offset?: number;
  epoch?: string;
  recovered?: boolean;
  reason?: StreamLossReason;
}

/** Why a stream's history could not give what a subscriber missed. */
export type StreamLossReason = 'epoch_changed' | 'history_trimmed' | 'unavailable' | 'overflow';

/** Offsets `from`..`to` (inclusive) of `epoch` will never reach this session: they are lost. */
export interface StreamGap {
  type: 'stream.gap';
  stream: string;
  epoch: string;
  from: number;
  to: number;
  reason: StreamLossReason;
}

export interface StreamUnsubscribed {
  type: 'stream.unsubscribed';
  stream: string;
}

export interface StreamPublished {
  type: 'stream.published';
  stream: string;
}

export interface StreamInfo {
  name: string;
  subscribers: number;
}

/** One page of the mesh's streams, in name order; `next` (the cursor of the next page) while more follow. */
export interface StreamListResult {
  type: 'stream.list_result';
  streams: StreamInfo[];
  next?: string;
}

export interface StreamData {
  type: 'stream.data';
  stream: string;
  data: unknown;
  from: string;
  fromSession: string;
  /** The publish's place in the stream (absent with STREAM_POSITIONS=off). */
  offset?: number;
  epoch?: string;
}

// Mesh clock

export interface ClockStatus {
  speed: number;
  paused: boolean;
  tick: number;
  /** Simulated time, ISO-8601 UTC. */
  simTime: string;
  /** Node running the clock (its leader), or null when nobody runs it. */
  leader: string | null;
  epoch: number;
}

/** The answer to every clock request. */
export interface ClockStatusFrame extends ClockStatus {
  type: 'clock.status';
}

export interface ClockTick {
  type: 'clock.tick';
  tick: number;
  simTime: string;
  speed: number;
  epoch: number;
}

// MCP tools hosted by peers

export interface McpTool {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

export interface McpServer {
  server: string;
  description: string;
  /** The host member's pubkey. */
  host: string;
  tools: McpTool[];
  online: boolean;
}

export interface McpRegistered {
  type: 'mcp.registered';
  server: string;
}

export interface McpUnregistered {
  type: 'mcp.unregistered';
  server: string;
}

/**
 * One page of the mesh's servers, in name order (at most MCP_LIST_MAX_SERVERS and 64 KiB); `next` (the
 * cursor of the next page) while more follow.
 */
export interface McpListResult {
  type: 'mcp.list_result';
  servers: McpServer[];
  next?: string;
}

/** A call for the host to answer with `mcp.result` (its `callId` is the broker's, not the caller's). */
export interface McpInvoke {
  type: 'mcp.invoke';
  callId: string;
  server: string;
  tool: string;
  args: unknown;
  /** The caller's pubkey. */
  caller: string;
}

/** The one answer a caller gets for its `mcp.call`: its own callId, and its request's rid. */
export interface McpCallResult {
  type: 'mcp.call_result';
  callId: string;
  result?: unknown;
  error?: string;
  rid?: string;
}

export interface McpResultAccepted {
  type: 'mcp.result_accepted';
  callId: string;
}

// Scheduled messages

export interface ScheduleInfo {
  scheduleId: string;
  to: string;
  body: string;
  /** ms since the epoch, for a one-shot schedule. */
  at: number | null;
  cron: string | null;
  tz: string | null;
  nextFireAt: number | null;
  occurrences: number;
  createdAt: string;
}

export interface ScheduleCreated {
  type: 'schedule.created';
  scheduleId: string;
  nextFireAt: number;
}

export interface ScheduleCancelled {
  type: 'schedule.cancelled';
  scheduleId: string;
}

export interface ScheduleListResult {
  type: 'schedule.list_result';
  schedules: ScheduleInfo[];
  /** The cursor of the next page (ask again with `cursor`); absent on the last page. */
  next?: string;
}

// URL watches

export interface WatchInfo {
  watchId: string;
  url: string;
  mode: WatchMode;
  extract: string | null;
  intervalSec: number;
  notifyOn: string;
  /** The last value (the last notified one while a notification is held back); beyond 4 KiB its digest form. */
  lastValue: string | WatchValueDigest | null;
  lastCheckedAt: string | null;
  lastError: string | null;
  createdAt: string;
}

export interface WatchCreated {
  type: 'watch.created';
  watchId: string;
}

export interface WatchDeleted {
  type: 'watch.deleted';
  watchId: string;
}

export interface WatchListResult {
  type: 'watch.list_result';
  watches: WatchInfo[];
}

// Audit chain

export interface AuditEntry {
  seq: number;
  eventType: string;
  actor: string | null;
  payload: unknown;
  createdAt: string;
  prevHash: string;
  hash: string;
  /** Set when another member's private fields (a watch URL) were redacted: the hash is the stored row's. */
  redacted?: true;
}

export interface AuditResult {
  type: 'audit.result';
  entries: AuditEntry[];
  /** Set when the page stopped at its byte bound before `limit`: ask again with `before` = the last seq. */
  more?: true;
}

/** Rows of a chain that claim one place in it. */
export interface AuditFork {
  /** What the rows share: the same `seq`, or the same `prevHash`. */
  kind: 'seq' | 'prevHash';
  seq: number;
  rowIds: number[];
}

export interface AuditVerifyResult {
  type: 'audit.verify_result';
  valid: boolean;
  entries: number;
  /** The first row (in seq order) whose hash or link does not hold. */
  brokenAt?: { seq: number; id: number; reason: string };
  forks: AuditFork[];
}

// Unions

/** What a request handler answers with (the gateway adds the request's rid). */
export type ReplyFrame =
  | Pong
  | Sent
  | Acked
  | Peers
  | StreamSubscribed
  | StreamUnsubscribed
  | StreamPublished
  | StreamListResult
  | ClockStatusFrame
  | McpRegistered
  | McpUnregistered
  | McpListResult
  | McpResultAccepted
  | ScheduleCreated
  | ScheduleCancelled
  | ScheduleListResult
  | WatchCreated
  | WatchDeleted
  | WatchListResult
  | AuditResult
  | AuditVerifyResult;

/** What the broker sends a session unasked. */
export type EventFrame =
  | Message
  | WatchTriggered
  | PeerJoined
  | PeerLeft
  | PeerStatus
  | StreamData
  | StreamGap
  | ClockTick
  | McpInvoke
  | McpCallResult;

/** Every frame the broker sends. */
export type BrokerFrame = Welcome | ErrorFrame | ReplyFrame | EventFrame;
