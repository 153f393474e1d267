/**
 * What the SDK's promises reject with. Every error has a string `code`, so an app can switch on it
 * without `instanceof` (which a second copy of the package, or a bundle boundary, would break).
 */

/** Why a client stopped: what `closed` carries and `MeshClient.closedBy` keeps. */
export interface ClientClosed {
  code: number;
  reason: string;
  /** True when the broker refused the peer for good: connecting again would be refused again. */
  permanent: boolean;
}

/** An `error` frame in reply to a request, or a request that could not complete. */
export class MeshRequestError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
    this.name = 'MeshRequestError';
  }
}

/**
 * What a pending request or `connect()` rejects with once the client stopped (code `closed`): the close
 * that stopped it, and whether the broker refused the peer for good.
 */
export class MeshClosedError extends MeshRequestError {
  constructor(
    readonly closed: ClientClosed,
    message: string,
    code = 'closed',
  ) {
    super(code, message);
    this.name = 'MeshClosedError';
  }

  get permanent(): boolean {
    return this.closed.permanent;
  }
}

/**
 * Why `connect()` gave up, as `code`:
 * - `unreachable`: no attempt got as far as a welcome (dead URL, refused TCP, a proxy that refuses the
 *   upgrade, a broker that closed transiently each time) by the end of `timeoutMs` or `maxAttempts`;
 * - `timeout`: a socket opened but no welcome came within `timeoutMs`;
 * - `refused`: the broker refused the hello for good; `closed` has its close code and reason;
 * - `aborted`: the caller's `signal` fired;
 * - `closed`: `close()` was called meanwhile.
 * A subclass of MeshClosedError, so code that caught a refusal as MeshClosedError still does.
 */
export type ConnectErrorCode = 'unreachable' | 'timeout' | 'refused' | 'aborted' | 'closed';

export class MeshConnectError extends MeshClosedError {
  constructor(
    override readonly code: ConnectErrorCode,
    closed: ClientClosed,
    message: string,
  ) {
    super(closed, message, code);
    this.name = 'MeshConnectError';
  }
}

/** What a request whose `signal` fired rejects with (code `aborted`). */
export function abortedError(what: string, signal: AbortSignal): MeshRequestError {
  const reason = signal.reason instanceof Error ? signal.reason.message : String(signal.reason ?? 'aborted');
  return new MeshRequestError('aborted', `${what} aborted (${reason})`);
}
