/**
 * Every frame a peer sends the broker (docs/protocol.md), as the zod schema the broker parses it with. A
 * request that fails its schema is answered with `bad_request` naming the first bad field (parse.ts);
 * the broker registers one handler per schema on its router (routes.ts).
 */
import { z } from 'zod';
import { groupName, hex, idField, rid, sendTarget, uuid } from './parse.js';

// Session

export const helloFrame = z.object({
  type: z.literal('hello'),
  v: z.literal(1),
  meshId: uuid,
  pubkey: hex(32),
  sessionId: uuid,
  ts: z.number().int().nonnegative(),
  nonce: hex(16),
  sig: hex(64),
  name: z.string().max(128).optional(),
  groups: z.array(groupName).max(32).optional(),
  resume: z.object({}).passthrough().optional(),
  rid,
});
export type HelloFrame = z.infer<typeof helloFrame>;

/** `ping` → `pong`: lets a peer check the path to its node end to end. */
export const pingFrame = z.object({ type: z.literal('ping'), rid });

// Durable messages

export const sendFrame = z.object({
  type: z.literal('send'),
  id: z.string().min(1).max(128),
  to: sendTarget,
  body: z.string(),
  rid,
});

/** A messageId as the broker writes it: `<row id>-<16 hex tag>` (docs/protocol.md § Message identity). */
export const MESSAGE_ID_PATTERN = /^([1-9]\d{0,15})-([0-9a-f]{16})$/;

export const ackFrame = z.object({
  type: z.literal('ack'),
  // `<row id>-<16 hex tag>` exactly as a message frame gave it (docs/protocol.md § Message identity); a bare
  // row id (the format before migration 0014) names no message: after a restore it may be another one's.
  messageId: z
    .string()
    .regex(
      MESSAGE_ID_PATTERN,
      'must be the messageId of a message frame as given (<id>-<16 hex digits>, e.g. "42-9f86d081884c7d65")',
    ),
  rid,
});

// Presence

export const peersListFrame = z.object({
  type: z.literal('peers.list'),
  /** The `next` of the previous page: sessions after it. */
  cursor: uuid.optional(),
  rid,
});

// Streams

export const streamName = z
  .string()
  .regex(/^[A-Za-z0-9_.:/-]{1,128}$/, 'must be 1-128 letters, digits or _ . : / -');

/** An epoch as the broker makes them (memory: `m<hex>-<n>`, Redis: `r<hex>`). */
export const streamEpoch = z.string().regex(/^[A-Za-z0-9-]{1,64}$/, 'must be 1-64 letters, digits or -');
/** The last place a subscriber saw: what it resumes after (docs/protocol.md § Streams). */
export const streamSince = z.strictObject({
  offset: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  epoch: streamEpoch,
});
export const streamSubscribeFrame = z.object({
  type: z.literal('stream.subscribe'),
  stream: streamName,
  since: streamSince.optional(),
  rid,
});
export const streamUnsubscribeFrame = z.object({
  type: z.literal('stream.unsubscribe'),
  stream: streamName,
  rid,
});
export const streamPublishFrame = z.object({
  type: z.literal('stream.publish'),
  stream: streamName,
  data: z.unknown().refine((value) => value !== undefined, 'is required'),
  rid,
});
/** The most streams one `stream.list_result` lists; a longer list is paged (`next`). */
export const STREAM_LIST_MAX_STREAMS = 500;
export const streamListFrame = z.object({
  type: z.literal('stream.list'),
  /** The `next` of the previous page: streams after it. */
  cursor: streamName.optional(),
  limit: z.number().int().min(1).max(STREAM_LIST_MAX_STREAMS).optional(),
  rid,
});

// Mesh clock

export const clockSetFrame = z.object({
  type: z.literal('clock.set'),
  speed: z.number().min(1, 'must be at least 1').max(100, 'must be at most 100'),
  rid,
});
export const clockPauseFrame = z.object({ type: z.literal('clock.pause'), rid });
export const clockResumeFrame = z.object({ type: z.literal('clock.resume'), rid });
export const clockGetFrame = z.object({ type: z.literal('clock.get'), rid });

// MCP tools hosted by peers

const mcpName = z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1-64 letters, digits, "_", "." or "-"');
const mcpTool = z.object({
  name: mcpName,
  description: z.string().max(2000).default(''),
  inputSchema: z.record(z.string(), z.unknown()).default({}),
});
export const mcpRegisterFrame = z.object({
  type: z.literal('mcp.register'),
  server: mcpName,
  description: z.string().max(2000).default(''),
  tools: z.array(mcpTool).max(100),
  rid,
});
export const mcpUnregisterFrame = z.object({ type: z.literal('mcp.unregister'), server: mcpName, rid });
/** The most servers one `mcp.list_result` lists; a longer list is paged (`next`). */
export const MCP_LIST_MAX_SERVERS = 100;
export const mcpListFrame = z.object({
  type: z.literal('mcp.list'),
  /** The `next` of the previous page: servers after it. */
  cursor: mcpName.optional(),
  limit: z.number().int().min(1).max(MCP_LIST_MAX_SERVERS).optional(),
  rid,
});
export const mcpCallFrame = z.object({
  type: z.literal('mcp.call'),
  callId: z.string().min(1).max(128),
  server: mcpName,
  tool: mcpName,
  args: z.unknown().default({}),
  rid,
});
export const mcpResultFrame = z.object({
  type: z.literal('mcp.result'),
  callId: z.string().min(1).max(128),
  result: z.unknown().optional(),
  error: z.string().max(4000).optional(),
  rid,
});

// Scheduled messages

/** The last instant a JS Date holds (±8.64e15 ms around the epoch); a later `at` is `bad_request`. */
export const MAX_DATE_MS = 8.64e15;

export const scheduleCreateFrame = z.object({
  type: z.literal('schedule.create'),
  to: sendTarget,
  body: z.string(),
  at: z
    .number()
    .int()
    .positive()
    .max(MAX_DATE_MS, `must be at most ${MAX_DATE_MS} (the last instant a Date holds)`)
    .optional(),
  cron: z.string().max(200).optional(),
  tz: z.string().max(64).optional(),
  rid,
});
export const scheduleCancelFrame = z.object({ type: z.literal('schedule.cancel'), scheduleId: idField, rid });
export const scheduleListFrame = z.object({
  type: z.literal('schedule.list'),
  /** The `next` of the previous page: schedules after it. */
  cursor: z.string().max(64).optional(),
  rid,
});

// URL watches

export const watchMode = z.enum(['hash', 'json', 'status']);
export type WatchMode = z.infer<typeof watchMode>;

export const watchCreateFrame = z.object({
  type: z.literal('watch.create'),
  url: z.string().min(1).max(2048),
  mode: watchMode,
  extract: z.string().min(1).max(256).optional(),
  intervalSec: z.number().int().min(5, 'must be at least 5').max(86_400, 'must be at most 86400'),
  notifyOn: z.string().min(1).max(256).optional(),
  rid,
});
export const watchDeleteFrame = z.object({ type: z.literal('watch.delete'), watchId: idField, rid });
export const watchListFrame = z.object({ type: z.literal('watch.list'), rid });

// Audit chain

export const auditQueryFrame = z.object({
  type: z.literal('audit.query'),
  limit: z.number().int().min(1).max(1000).optional(),
  /** Only entries with a seq below this one (paging backwards). */
  before: z.number().int().positive().optional(),
  rid,
});
export const auditVerifyFrame = z.object({ type: z.literal('audit.verify'), rid });
