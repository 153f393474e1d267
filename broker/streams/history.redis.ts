import { randomBytes } from 'node:crypto';
import { Cluster } from 'ioredis';
import type { RedisClient } from '../redis/clients.js';
import type { RedisGuard } from '../redis/guard.js';
import type { HistoryBounds, HistoryRead, PlacedFrame, StreamHistory, UnplacedFrame } from './history.js';
import { storedText } from './history.js';

/**
 * The shared history (`ha.streams`), in Redis. Per stream two keys with one hash tag, so a Redis Cluster
 * keeps them in one slot and each script runs on one master (docs/redis-cluster.md); the client's key
 * prefix (the brokers' ACL prefix) goes in front of both:
 * - `stream:{<mesh>/<stream>}:pos`, a hash: `epoch`, `offset` (the top), `bytes` (of the log);
 * - `stream:{<mesh>/<stream>}:log`, a list of `<offset> <ms> <frame JSON>`, oldest first, contiguous.
 * One Lua script places a publish (HINCRBY) and appends it atomically, so an offset is never given
 * twice nor held out of order. A missing `pos` (never used, expired, or lost with a restart or flush)
 * starts a new epoch (random, from the calling node) and drops any log left of the old one. Trimming
 * (size, age by Redis's clock, bytes) happens in both scripts, so a read never returns what the bounds
 * have given up. The log expires after the age bound of quiet; the position after POSITION_TTL_MS.
 */
const TRIM = `
local function init(pos, log, epoch)
  local current = redis.call('HGET', pos, 'epoch')
  if current then return current end
  redis.call('DEL', log)
  redis.call('HSET', pos, 'epoch', epoch, 'offset', 0, 'bytes', 0)
  return epoch
end
local function trim(pos, log, now, size, ttl, maxBytes)
  local n = redis.call('LLEN', log)
  local bytes = 0
  if n > 0 then bytes = tonumber(redis.call('HGET', pos, 'bytes') or '0') end
  while n > 0 do
    local head = redis.call('LINDEX', log, 0)
    local s1 = string.find(head, ' ', 1, true)
    local s2 = string.find(head, ' ', s1 + 1, true)
    local at = tonumber(string.sub(head, s1 + 1, s2 - 1))
    if n <= size and bytes <= maxBytes and now - at <= ttl then break end
    redis.call('LPOP', log)
    bytes = bytes - #head
    n = n - 1
  end
  redis.call('HSET', pos, 'bytes', bytes)
  return n
end
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`;

/**
 * KEYS: pos, log. ARGV: new epoch, size, ttl, bytes, position TTL, then one frame JSON per publish, in
 * order. → {epoch, offset of the first}. The publishes of one stream that a node has in one turn of its
 * event loop are placed by one call (history.redis.ts `append` batches them), consecutive offsets in their
 * order. The hot path is a handful of calls: size and bytes are checked from RPUSH's and HINCRBY's own
 * answers, so the full trim (which reads the oldest entry's age) runs only when a bound is passed or about
 * every 64th publish; a read always trims fully, so nothing older than the age bound is ever replayed.
 */
const APPEND = `${TRIM}
local epoch = init(KEYS[1], KEYS[2], ARGV[1])
local count = #ARGV - 5
local last = redis.call('HINCRBY', KEYS[1], 'offset', count)
local first = last - count + 1
local t = now()
local entries = {}
local size = 0
for i = 1, count do
  local entry = (first + i - 1) .. ' ' .. t .. ' ' .. ARGV[5 + i]
  entries[i] = entry
  size = size + #entry
end
local n = redis.call('RPUSH', KEYS[2], unpack(entries))
local bytes = size
-- A log that had expired (a quiet stream) leaves its byte count behind: it starts again here.
if n == count then redis.call('HSET', KEYS[1], 'bytes', bytes) else bytes = redis.call('HINCRBY', KEYS[1], 'bytes', size) end
if n > tonumber(ARGV[2]) or bytes > tonumber(ARGV[4]) or (last % 64) < count then
  trim(KEYS[1], KEYS[2], t, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {epoch, first}
`;

/** The most publishes one append call places (Lua's unpack is bounded; a batch stays small). */
export const APPEND_BATCH_MAX = 256;

interface Batch {
  meshId: string;
  stream: string;
  frames: UnplacedFrame[];
  waiting: Array<{ resolve: (placed: PlacedFrame) => void; reject: (error: unknown) => void }>;
}

/** KEYS: pos, log. ARGV: new epoch, after (-1: none), size, ttl, bytes, position TTL. → {epoch, top, n, entries…} */
const READ = `${TRIM}
local epoch = init(KEYS[1], KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
local top = tonumber(redis.call('HGET', KEYS[1], 'offset'))
local n = trim(KEYS[1], KEYS[2], now(), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
local after = tonumber(ARGV[2])
local result = {epoch, top, n}
if after < 0 or after >= top or n == 0 then return result end
local first = top - n + 1
local start = math.max(0, after + 1 - first)
for _, entry in ipairs(redis.call('LRANGE', KEYS[2], start, -1)) do table.insert(result, entry) end
return result
`;

/** How long a quiet stream's position outlives its log: a subscriber resuming within it sees the same epoch. */
export const POSITION_TTL_MS = 86_400_000;

function keys(meshId: string, stream: string): [string, string] {
  const tag = `stream:{${meshId}/${stream}}`;
  return [`${tag}:pos`, `${tag}:log`];
}

function newEpoch(): string {
  return `r${randomBytes(8).toString('hex')}`;
}

/** The most a history call waits: longer than REDIS_TIMEOUT_MS, as a publish waits for its place. */
export const HISTORY_TIMEOUT_MIN_MS = 2000;

/**
 * The history's own connection: the main client's settings and key prefix (the brokers' ACL prefix), but
 * its command timeout is at least HISTORY_TIMEOUT_MIN_MS. The main client's REDIS_TIMEOUT_MS (250 ms) is
 * for calls whose caller falls back or loses only a hint; a placed publish timed out at 250 ms under load
 * would be refused though Redis may have placed it. Connected by `connect()` (the row's node work).
 */
export function historyClient(main: RedisClient, redisTimeoutMs: number): RedisClient {
  const commandTimeout = Math.max(redisTimeoutMs, HISTORY_TIMEOUT_MIN_MS);
  const client =
    main instanceof Cluster
      ? main.duplicate(undefined, { redisOptions: { ...main.options.redisOptions, commandTimeout } })
      : main.duplicate({ commandTimeout });
  // The main client logs Redis's connection errors; this one's calls fail and are answered as unavailable.
  client.on('error', () => {});
  return client;
}

export class RedisHistory implements StreamHistory {
  constructor(
    private readonly redis: RedisClient,
    private readonly bounds: HistoryBounds,
    /** Says when Redis is not worth trying (down, or paused after a timeout): a call fails at once then. */
    private readonly guard: RedisGuard,
  ) {}

  /** `mesh\nstream` → the publishes waiting for this turn's append call. */
  private readonly open = new Map<string, Batch>();

  /** Runs one call unless the guard says no; tells the guard of a failure (a timeout pauses Redis). */
  private async call<T>(run: () => Promise<T>): Promise<T> {
    if (!this.guard.usable()) throw new Error('redis unavailable or stalled');
    try {
      return await run();
    } catch (error) {
      this.guard.failed(error);
      throw error;
    }
  }

  /**
   * Queued for this turn of the event loop with the stream's other publishes, placed together; each
   * promise resolves in publish order. A batch is sent when full or at `setImmediate`, and a stream has
   * one open batch at a time, so calls leave (and Redis places them) in the order they were made.
   */
  append(meshId: string, frame: UnplacedFrame): Promise<PlacedFrame> {
    const key = `${meshId}\n${frame.stream}`;
    let batch = this.open.get(key);
    if (!batch) {
      batch = { meshId, stream: frame.stream, frames: [], waiting: [] };
      this.open.set(key, batch);
      if (this.open.size === 1) setImmediate(() => this.flushAll());
    }
    const placed = new Promise<PlacedFrame>((resolve, reject) => batch.waiting.push({ resolve, reject }));
    batch.frames.push(frame);
    if (batch.frames.length >= APPEND_BATCH_MAX) this.flush(key, batch);
    return placed;
  }

  private flushAll(): void {
    for (const [key, batch] of [...this.open]) this.flush(key, batch);
  }

  private flush(key: string, batch: Batch): void {
    this.open.delete(key);
    const [pos, log] = keys(batch.meshId, batch.stream);
    const { size, ttlMs, bytes } = this.bounds;
    const texts = batch.frames.map(storedText);
    this.call(() =>
      this.redis.eval(
        APPEND,
        2,
        pos,
        log,
        newEpoch(),
        size,
        ttlMs,
        bytes,
        Math.max(POSITION_TTL_MS, ttlMs),
        ...texts,
      ),
    ).then(
      (reply) => {
        const [epoch, first] = reply as [string, number];
        batch.waiting.forEach((w, i) => {
          w.resolve({ ...batch.frames[i]!, offset: first + i, epoch });
        });
      },
      (error: unknown) => {
        for (const w of batch.waiting) w.reject(error);
      },
    );
  }

  async read(meshId: string, stream: string, after?: number): Promise<HistoryRead> {
    const [pos, log] = keys(meshId, stream);
    const { size, ttlMs, bytes } = this.bounds;
    const [epoch, top, held, ...entries] = (await this.call(() =>
      this.redis.eval(
        READ,
        2,
        pos,
        log,
        newEpoch(),
        after ?? -1,
        size,
        ttlMs,
        bytes,
        Math.max(POSITION_TTL_MS, ttlMs),
      ),
    )) as [string, number, number, ...string[]];
    return { epoch, offset: top, first: top - held + 1, frames: entries.map((e) => parseEntry(e, epoch)) };
  }

  /** One HMGET per stream, in parallel: on a Redis Cluster their keys live in different slots. */
  async tops(streams: Array<{ meshId: string; stream: string }>) {
    return Promise.all(
      streams.map(async ({ meshId, stream }) => {
        const [epoch, offset] = await this.call(() =>
          this.redis.hmget(keys(meshId, stream)[0], 'epoch', 'offset'),
        );
        return epoch && offset ? { epoch, offset: Number(offset) } : null;
      }),
    );
  }
}

/** `<offset> <ms> <frame JSON>` → the frame with its place. */
function parseEntry(entry: string, epoch: string): PlacedFrame {
  const first = entry.indexOf(' ');
  const second = entry.indexOf(' ', first + 1);
  const frame = JSON.parse(entry.slice(second + 1)) as UnplacedFrame;
  return { ...frame, offset: Number(entry.slice(0, first)), epoch };
}
