/** Stable error codes of `error` frames (docs/protocol.md). */
export type ErrorCode =
  | 'bad_request'
  | 'unknown_type'
  | 'no_hello'
  | 'rate_limited'
  | 'too_large'
  | 'not_found'
  | 'forbidden'
  | 'conflict'
  | 'limit_exceeded'
  | 'unavailable'
  | 'internal';

/** A request that cannot be served: becomes an `error` frame (or an HTTP status); the connection stays open. */
export class ProtocolError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'ProtocolError';
  }
}

/** WebSocket close codes (docs/protocol.md § Errors and close codes). */
export const CloseCode = {
  normal: 1000,
  draining: 1001,
  tooLarge: 1009,
  internal: 1011,
  protocolAbuse: 4400,
  helloRejected: 4401,
  memberRevoked: 4403,
  meshAtCapacity: 4408,
  sessionReplaced: 4409,
} as const;
