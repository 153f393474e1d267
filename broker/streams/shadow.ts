/**
 * Shadow comparator of `ha.streams` (docs/streams.md § Shadow): for each publish the local streams served,
 * the sessions of this node it reached (the local registry's subscribers of the stream, read when the
 * publish was answered, but the publisher) against those the shared implementation would reach here.
 *
 * The shared side, on a shadow copy: the shared implementation keeps each session's subscriptions in
 * Postgres (`stream_subscriptions`), and a node delivers to what its registry holds, which a session's
 * start fills from its rows (so a session that reconnects here brings the subscriptions it made on
 * another node). The copy is those rows mirrored into the shadow Redis (broker/shadow/copy.ts), one set
 * of streams per session under `shadow:streams:<mesh>:<session>`, written by every node in shadow, plus a
 * registry of this node's own in memory that the copy fills as the shared one would: each subscribe,
 * unsubscribe, session start and session end the local implementation answers is applied to both, with
 * the shared rules (the per-session bound counted over the copy, so over every node). Neither the live
 * `stream_subscriptions` rows nor the live registry are read for the shared side or written.
 */
import type { SessionIdentity } from '../connections/connection.js';
import type { RedisClient } from '../redis/clients.js';
import { openShadowRedis, type ShadowRedis } from '../shadow/copy.js';
import type { RowShadow, ShadowSample } from '../shadow/shadow.js';
import { LocalStreams } from './streams.local.js';

/** A session's set in the copy outlives a node that died holding it by at most this long. */
export const COPY_TTL_S = 24 * 3600;

/**
 * Adds a stream to a session's set unless the set is at the bound (the shared implementation's
 * `limit_exceeded`); 1 when the session holds the stream afterwards.
 */
const JOIN = `
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then
  if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
  redis.call('SADD', KEYS[1], ARGV[1])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1`;

export interface StreamsShadowOptions {
  local: LocalStreams;
  redis: RedisClient;
  maxPerSession: number;
  /** The sessions connected to this node now. */
  sessionsHere: () => Array<{ meshId: string; sessionId: string }>;
}

const keyOf = (meshId: string, sessionId: string) => `streams:${meshId}:${sessionId}`;

/**
 * The copy as a flip to shared would write it: the sets of the sessions connected here become what the
 * local registry holds for them (the rows of SharedStreams.activate), and `registry` holds the same.
 */
async function writeStartingCopy(
  redis: ShadowRedis,
  options: StreamsShadowOptions,
  registry: LocalStreams,
): Promise<void> {
  const held = new Map<string, { meshId: string; sessionId: string; streams: string[] }>();
  for (const { meshId, sessionId } of options.sessionsHere())
    held.set(keyOf(meshId, sessionId), { meshId, sessionId, streams: [] });
  for (const { meshId, stream, sessionId } of options.local.all()) {
    registry.add(meshId, stream, sessionId);
    const key = keyOf(meshId, sessionId);
    const entry = held.get(key) ?? { meshId, sessionId, streams: [] };
    entry.streams.push(stream);
    held.set(key, entry);
  }
  for (const [key, { streams }] of held) {
    const write = redis.client.multi().del(key);
    if (streams.length > 0) write.sadd(key, ...streams).expire(key, COPY_TTL_S);
    await write.exec();
  }
}

export function streamsShadow(options: StreamsShadowOptions): RowShadow {
  let redis: ShadowRedis | undefined;
  // What the shared implementation's registry would hold here; it delivers nothing (no sink).
  let registry = new LocalStreams(() => {}, options.maxPerSession);
  const copy = (): ShadowRedis => {
    if (!redis?.guard.usable()) throw new Error('streams shadow copy: Redis unavailable');
    return redis;
  };
  const reached = (from: LocalStreams, session: SessionIdentity, stream: string) =>
    from.subscribersOf(session.meshId, stream).filter((id) => id !== session.sessionId);
  return {
    observes: ['publish', 'subscribe', 'unsubscribe', 'sessionStarted', 'sessionEnded'],
    capture(method, args, answer) {
      if (method !== 'publish') return answer;
      const [session, stream] = args as [SessionIdentity, string];
      return reached(options.local, session, stream);
    },
    /** The copy starts as a flip to shared would write it (writeStartingCopy). */
    async start() {
      redis = await openShadowRedis(options.redis);
      registry = new LocalStreams(() => {}, options.maxPerSession);
      await writeStartingCopy(redis, options, registry);
    },
    async stop() {
      await redis?.close();
      redis = undefined;
      registry = new LocalStreams(() => {}, options.maxPerSession);
    },
    async compare(method, args, local): Promise<ShadowSample | undefined> {
      if (!redis) return undefined;
      switch (method) {
        case 'publish': {
          const [session, stream] = args as [SessionIdentity, string];
          return { subject: `publish ${stream}`, local, shared: reached(registry, session, stream) };
        }
        case 'subscribe': {
          const [session, stream] = args as [SessionIdentity, string];
          const key = keyOf(session.meshId, session.sessionId);
          const joined = await copy().client.eval(JOIN, 1, key, stream, options.maxPerSession, COPY_TTL_S);
          // Refused by the shared bound: the shared registry does not hold it (the publishes say so).
          if (joined === 1) registry.add(session.meshId, stream, session.sessionId);
          return undefined;
        }
        case 'unsubscribe': {
          const [session, stream] = args as [SessionIdentity, string];
          await copy().client.srem(keyOf(session.meshId, session.sessionId), stream);
          await registry.unsubscribe(session, stream);
          return undefined;
        }
        case 'sessionStarted': {
          // The shared start: the session brings the subscriptions it made anywhere.
          const [meshId, sessionId] = args as [string, string];
          for (const stream of await copy().client.smembers(keyOf(meshId, sessionId)))
            registry.add(meshId, stream, sessionId);
          return undefined;
        }
        case 'sessionEnded': {
          const [meshId, sessionId] = args as [string, string];
          await copy().client.del(keyOf(meshId, sessionId));
          await registry.sessionEnded(meshId, sessionId);
          return undefined;
        }
        default:
          return undefined;
      }
    },
  };
}
