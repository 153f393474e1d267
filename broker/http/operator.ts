/**
 * The operator's reads of a node: `GET /metrics` (Prometheus text) and `GET /flags` (what the node acts
 * on), behind `Authorization: Bearer <METRICS_TOKEN>` or the admin token (current or retiring), so nothing
 * of them answers through the load balancer to whoever reaches it (issue 30; SECURITY.md). Prometheus
 * holds the metrics token, never the admin token; the workbench's own readers send the admin token.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { presentedToken } from './admin.js';

export interface OperatorReadOptions {
  metricsToken: string | undefined;
  adminToken: string;
  adminTokenPrevious: string | undefined;
  onPreviousTokenUsed: (request: FastifyRequest) => void;
  metrics: (reply: FastifyReply) => Promise<FastifyReply>;
  flags: () => object;
}

function authorised(request: FastifyRequest, options: OperatorReadOptions): boolean {
  const header = request.headers.authorization;
  // Both comparisons always run (each in constant time), so timing tells no token from the other.
  const admin = presentedToken(header, options.adminToken, options.adminTokenPrevious);
  const scraper =
    presentedToken(header, options.metricsToken ?? options.adminToken, undefined) !== undefined &&
    options.metricsToken !== undefined;
  if (admin === 'previous') options.onPreviousTokenUsed(request);
  return admin !== undefined || scraper;
}

export function registerOperatorReads(app: FastifyInstance, options: OperatorReadOptions): void {
  app.register(async (scope) => {
    scope.addHook('onRequest', async (request, reply) => {
      if (authorised(request, options)) return;
      return reply.code(401).header('www-authenticate', 'Bearer').send({
        error: 'unauthorized',
        message: '/metrics and /flags need Authorization: Bearer <METRICS_TOKEN or admin token>',
      });
    });
    scope.get('/metrics', async (_request, reply) => options.metrics(reply));
    scope.get('/flags', async () => options.flags());
  });
}
