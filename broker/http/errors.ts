import type { FastifyError, FastifyInstance } from 'fastify';
import { type ErrorCode, ProtocolError } from '../../protocol/errors.js';

const STATUS: Record<ErrorCode, number> = {
  bad_request: 400,
  unknown_type: 400,
  no_hello: 400,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  limit_exceeded: 429,
  too_large: 413,
  rate_limited: 429,
  internal: 500,
  unavailable: 503,
};

/** Every HTTP error answers `{error, message}` with the same codes as WebSocket error frames. */
export function registerErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError | ProtocolError, request, reply) => {
    if (error instanceof ProtocolError) {
      return reply.code(STATUS[error.code]).send({ error: error.code, message: error.message });
    }
    const status = error.statusCode ?? 500;
    if (status >= 500) request.log.error({ err: error }, 'request failed');
    const code = status === 413 ? 'too_large' : status < 500 ? 'bad_request' : 'internal';
    return reply.code(status).send({ error: code, message: status < 500 ? error.message : 'internal error' });
  });
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({ error: 'not_found', message: `no route ${request.method} ${request.url}` }),
  );
}
