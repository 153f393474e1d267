import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { ProtocolError } from '../../protocol/errors.js';
import { parseWith, storableText, uuid } from '../../protocol/parse.js';
import type { BrokerMetrics } from '../metrics.js';
import type { Presence } from '../presence/presence.js';
import type { RateLimits } from '../rate-limits/rate-limits.js';

const body = z.object({
  sessionId: uuid,
  status: storableText(1, 64),
});

/**
 * `POST /hook/status {sessionId, status}`: a peer's local tooling reports what the session is doing
 * ("working", "idle", …); the mesh sees `peer.status`. The session id is the credential (an unguessable
 * UUID the peer chose); the endpoint is rate limited per session.
 */
export function registerHook(
  app: FastifyInstance,
  presence: Presence,
  limits: RateLimits,
  metrics: BrokerMetrics,
): void {
  app.post('/hook/status', async (request, reply) => {
    const { sessionId, status } = parseWith(body, request.body);
    const decision = await limits.consume('hook', sessionId.toLowerCase());
    if (!decision.allowed) {
      metrics.rateLimited.inc({ kind: 'hook' });
      reply.header('retry-after', Math.ceil(decision.retryAfterMs / 1000));
      throw new ProtocolError(
        'rate_limited',
        `too many status reports; retry in ${decision.retryAfterMs} ms`,
      );
    }
    if (!(await presence.setStatus(sessionId.toLowerCase(), status))) {
      throw new ProtocolError('not_found', `no session ${sessionId} on this node`);
    }
    return { ok: true };
  });
}
