import type { FastifyInstance } from 'fastify';
import { isNotPrimary } from '../db/errors.js';
import type { Pool } from '../db/pool.js';
import type { BrokerMetrics } from '../metrics.js';
import type { RedisClient } from '../redis/clients.js';

const CHECK_TIMEOUT_MS = 2000;

async function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('timed out')), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export type NodeLifecycle = 'starting' | 'serving' | 'draining';

export interface HealthOptions {
  nodeId: string;
  pool: Pool;
  redis: RedisClient;
  metrics: BrokerMetrics;
  /**
   * Where the node is in its life: `starting` from the moment it listens until every start step ran (its
   * heartbeat row written), `serving`, then `draining`. Only a serving node passes a check.
   */
  lifecycle: () => NodeLifecycle;
  /** Whether this node runs the cluster's background work (false on a phase-1 standby). */
  backgroundActive: () => boolean;
  /**
   * The active lease as this node sees it: `off` while `ha.active-lease` is off, else whether this node
   * holds it (`holder`) or not (`standby`). `GET /health/active` passes only where it is not `standby`.
   */
  activeLease: () => 'holder' | 'standby' | 'off';
}

/**
 * Asks Postgres and Redis whether they answer, and records it in `mesh_broker_db_up` / `_redis_up`. Run
 * by /health and before every /metrics scrape, so the gauges are fresh even when nobody polls /health.
 * `db` is `not_primary` when Postgres answers but the fence refuses its server (a standby, read-only, or an
 * old primary on an older timeline: broker/db/primary-fence.ts); the probe's checkout is what re-checks
 * after a suspicion.
 */
export async function probeDependencies(
  options: Pick<HealthOptions, 'pool' | 'redis' | 'metrics'>,
): Promise<{ db: 'up' | 'down' | 'not_primary'; redis: 'up' | 'down' }> {
  const db = await within(options.pool.query('SELECT 1'), CHECK_TIMEOUT_MS).then(
    () => 'up' as const,
    (error: unknown) => (isNotPrimary(error) ? ('not_primary' as const) : ('down' as const)),
  );
  const redis =
    options.redis.status === 'ready'
      ? await within(options.redis.ping(), CHECK_TIMEOUT_MS).then(
          () => 'up' as const,
          () => 'down' as const,
        )
      : ('down' as const);
  options.metrics.dbUp.set(db === 'down' ? 0 : 1);
  options.metrics.redisUp.set(redis === 'up' ? 1 : 0);
  return { db, redis };
}

/**
 * `GET /health`: 200 while the node serves and Postgres answers, 503 otherwise (while it is still starting
 * and while draining, so a load balancer sends no new peers there). Redis is reported but does not fail
 * the check: the broker's truth is Postgres.
 */
export function registerHealth(app: FastifyInstance, options: HealthOptions): void {
  app.get('/health', async (_request, reply) => {
    const { db, redis } = await probeDependencies(options);
    const lifecycle = options.lifecycle();
    const ok = db === 'up' && lifecycle === 'serving';
    const status = ok ? 'ok' : lifecycle !== 'serving' ? lifecycle : 'unavailable';
    options.metrics.healthChecks.inc({ route: 'health', status });
    return reply.code(ok ? 200 : 503).send({
      status,
      node: options.nodeId,
      db,
      redis,
      backgroundWork: options.backgroundActive() ? 'active' : 'standby',
    });
  });

  /**
   * `GET /health/active`: /health, and while `ha.active-lease` is on, only on the node holding the active
   * lease. Phase 1's load balancer checks it, so every session goes where the lease is: to the standby
   * once it took over, and not back to a restarted primary while the standby holds it (docs/active-lease.md).
   */
  app.get('/health/active', async (_request, reply) => {
    const { db, redis } = await probeDependencies(options);
    const lifecycle = options.lifecycle();
    const activeLease = options.activeLease();
    const ok = db === 'up' && lifecycle === 'serving' && activeLease !== 'standby';
    const status = ok ? 'ok' : lifecycle !== 'serving' ? lifecycle : db !== 'up' ? 'unavailable' : 'standby';
    options.metrics.healthChecks.inc({ route: 'active', status });
    return reply.code(ok ? 200 : 503).send({
      status,
      node: options.nodeId,
      db,
      redis,
      backgroundWork: options.backgroundActive() ? 'active' : 'standby',
      activeLease,
    });
  });
}
