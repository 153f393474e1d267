/**
 * Shadow comparator of `ha.connection-cap` (docs/connection-cap.md § Shadow): a shared cap on a shadow
 * copy (broker/shadow/copy.ts), seeded with the sessions the local count holds when shadow starts, is
 * asked every admission the local cap answered (and told every release), and the two decisions compared.
 * A copy that falls back to memory (its Redis unreachable) is an error, never an agreement.
 */
import type { Logger } from '../log.js';
import type { RedisClient } from '../redis/clients.js';
import { openShadowRedis, type ShadowRedis } from '../shadow/copy.js';
import type { RowShadow, ShadowSample } from '../shadow/shadow.js';
import type { ConnectionCap } from './connection-cap.js';
import { LocalConnectionCap } from './connection-cap.local.js';
import { SharedConnectionCap } from './connection-cap.shared.js';

export interface CapShadowOptions {
  local: ConnectionCap;
  redis: RedisClient;
  nodeId: string;
  cap: number;
  partTtlMs: number;
  log: Logger;
}

export function connectionCapShadow(options: CapShadowOptions): RowShadow {
  let redis: ShadowRedis | undefined;
  let copy: SharedConnectionCap | undefined;
  let fellBack = false;
  return {
    observes: ['admit', 'release'],
    async start() {
      redis = await openShadowRedis(options.redis);
      const seeded = new LocalConnectionCap(options.cap);
      const held = options.local instanceof LocalConnectionCap ? options.local.entries() : [];
      for (const { meshId, sessionId } of held) await seeded.admit(meshId, sessionId);
      copy = new SharedConnectionCap({
        redis: redis.client,
        guard: redis.guard,
        nodeId: options.nodeId,
        cap: options.cap,
        partTtlMs: options.partTtlMs,
        fallback: seeded,
        onFallback: () => {
          fellBack = true;
        },
        log: options.log,
      });
      await copy.activate();
    },
    async stop() {
      await copy?.deactivate();
      await redis?.close();
      copy = undefined;
      redis = undefined;
    },
    async compare(method, args, local): Promise<ShadowSample | undefined> {
      if (!copy) return undefined;
      const [meshId, sessionId] = args as [string, string];
      if (method === 'release') {
        await copy.release(meshId, sessionId);
        return undefined;
      }
      fellBack = false;
      const shared = await copy.admit(meshId, sessionId);
      if (fellBack) throw new Error('connection-cap shadow copy: Redis unavailable');
      // A session the local cap refused never connects: the copy lets it go too, to stay in step.
      if (shared && local === false) await copy.release(meshId, sessionId);
      return { subject: `admit ${meshId}`, local, shared };
    },
  };
}
