/**
 * Whether an error means "the database cannot take this request right now" (down, restarting, refusing
 * connections, the connection lost mid-query, or the server is not the primary of record) rather than a
 * fault of the request or of the code. Such a request gets a retryable `unavailable` error, never
 * `internal`: nothing of it was committed, or, if the connection died during COMMIT, a retry with the same
 * `id` is recognised as the same message.
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
  // pg.Client's own connectionTimeoutMillis (the start's wait for Postgres): a server that does not answer.
  'timeout expired',
  'Client has encountered a connection error',
  'Connection terminated unexpectedly',
  'the database system is',
  // pg's own bound on a query that set one (the primary-of-record check): the server answers nothing.
  'Query read timeout',
];

/** SQLSTATE read_only_sql_transaction: "cannot execute … in a read-only transaction" (a standby, or a fenced server). */
export const READ_ONLY_SQLSTATE = '25006';
/** The code of NotPrimaryError: not a SQLSTATE (five characters), so it never collides with one. */
export const NOT_PRIMARY_CODE = 'MESH_NOT_PRIMARY';

/** Why a connection is refused by the fence (broker/db/primary-fence.ts). */
export type NotPrimaryReason = 'in_recovery' | 'read_only' | 'old_timeline';

/**
 * The fence's refusal of a connection whose server is not the primary of record: the request is answered
 * `unavailable` and the connection is thrown away (broker/db/primary-fence.ts).
 */
export class NotPrimaryError extends Error {
  readonly code = NOT_PRIMARY_CODE;

  constructor(
    readonly reason: NotPrimaryReason,
    message: string,
  ) {
    super(message);
    this.name = 'NotPrimaryError';
  }
}

/**
 * Whether the server refused to write because it is not a writable primary: a write that failed with
 * 25006, or the fence's own refusal. For a caller the same as an outage: the database that takes writes is
 * not there now.
 */
export function isNotPrimary(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  return code === READ_ONLY_SQLSTATE || code === NOT_PRIMARY_CODE;
}

export function isDatabaseUnreachable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (isNotPrimary(error)) return true;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (UNREACHABLE_CODES.has(code)) return true;
    // SQLSTATE class 08: connection exception; 57P01–57P03: shutdown, crash, cannot connect now.
    if (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03') return true;
  }
  return UNREACHABLE_MESSAGES.some((text) => error.message.includes(text));
}
