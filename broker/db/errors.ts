/**
 * Whether an error means "the database cannot be reached right now" (down, restarting, refusing
 * connections, the connection lost mid-query) rather than a fault of the request or of the code. Such a
 * request gets a retryable `unavailable` error, never `internal`: nothing of it was committed, or, if the
 * connection died during COMMIT, a retry with the same `id` is recognised as the same message.
 */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
]);
const UNREACHABLE_MESSAGES = [
  'Connection terminated',
  'timeout exceeded when trying to connect',
  'Client has encountered a connection error',
  'Connection terminated unexpectedly',
  'the database system is',
];

export function isDatabaseUnreachable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (UNREACHABLE_CODES.has(code)) return true;
    // SQLSTATE class 08: connection exception; 57P01–57P03: shutdown, crash, cannot connect now.
    if (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03') return true;
  }
  return UNREACHABLE_MESSAGES.some((text) => error.message.includes(text));
}
