/**
 * What a failed watch fetch says, to the member (watch.list's `lastError`) and in logs: the kind of
 * failure, never an address. Node's own texts name the resolved address and port ("connect ECONNREFUSED
 * 10.0.4.7:80"), which tells a member what a name resolves to inside the node's network.
 */
import { BadTargetError, ForbiddenTargetError } from './address-guard.js';

const BY_CODE: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ENOTFOUND: 'host does not resolve',
  EAI_AGAIN: 'host lookup failed (try again)',
  EPIPE: 'connection closed',
  HPE_INVALID_CONSTANT: 'malformed HTTP response',
};

export function describeFetchError(error: Error): Error {
  // Ours, and worded without addresses (address-guard.ts).
  if (error instanceof ForbiddenTargetError || error instanceof BadTargetError) return error;
  const code = (error as NodeJS.ErrnoException).code;
  if (code === undefined) return new Error('request failed');
  const known = BY_CODE[code];
  if (known) return new Error(known);
  if (code.startsWith('HPE_')) return new Error('malformed HTTP response');
  // TLS failures have codes like CERT_HAS_EXPIRED, ERR_TLS_CERT_ALTNAME_INVALID: the code alone names
  // no address.
  return new Error(`request failed (${code})`);
}
