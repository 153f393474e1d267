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
  /** Too many sockets of one source address have not said hello yet: transient, come back later. */
  tooManyPendingHellos: 4429,
} as const;

/**
 * The reason of the 4401 a socket gets when no hello was accepted within 10 s: unlike the other 4401s it
 * says nothing about who the peer is (a slow network, or a node slow to admit), so it is transient.
 */
export const HELLO_TIMEOUT_REASON = 'no hello in time';

/** Closes after which the same peer would be refused again: its key, its session or its conduct. */
const PERMANENT_CLOSE_CODES = new Set<number>([
  CloseCode.protocolAbuse,
  CloseCode.helloRejected,
  CloseCode.memberRevoked,
  CloseCode.sessionReplaced,
]);

/**
 * Whether a close is a permanent refusal (docs/protocol.md § Errors and close codes): 4400, 4401 (but
 * the hello timeout), 4403 and 4409 are; every other close is transient (the node drains, fails, is full
 * or busy: 1001, 1006, 1008, 1009, 1011, 4408, 4429), and so is any code this version does not know, so
 * a newer broker's transient code never stops an older peer for good.
 */
export function closeIsPermanent(code: number, reason: string): boolean {
  if (code === CloseCode.helloRejected && reason === HELLO_TIMEOUT_REASON) return false;
  return PERMANENT_CLOSE_CODES.has(code);
}
