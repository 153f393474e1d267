/**
 * Which database errors a request answers `unavailable` for (broker/db/errors.ts): an outage, and a server
 * that is not the primary of record (a write refused as read-only, or the fence's refusal:
 * broker/db/primary-fence.ts); a fault of the request stays what it is.
 */
import { describe, expect, it } from 'vitest';
import { isDatabaseUnreachable, isNotPrimary, NotPrimaryError } from '../../broker/db/errors.js';

/** An error as pg reports a server's refusal: a message and its SQLSTATE. */
function serverError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

describe('database errors', () => {
  it('a write refused as read-only (25006) and the fence refusal are "not the primary", and so an outage', () => {
    const readOnly = serverError('25006', 'cannot execute INSERT in a read-only transaction');
    const fenced = new NotPrimaryError('old_timeline', 'the database server is on timeline 1, older than 2');
    for (const error of [readOnly, fenced]) {
      expect(isNotPrimary(error)).toBe(true);
      expect(isDatabaseUnreachable(error)).toBe(true);
    }
  });

  it("a check that timed out is an outage, not the primary's refusal", () => {
    const timedOut = new Error('Query read timeout');
    expect(isDatabaseUnreachable(timedOut)).toBe(true);
    expect(isNotPrimary(timedOut)).toBe(false);
  });

  it('a fault of the request is neither', () => {
    const duplicate = serverError('23505', 'duplicate key value violates unique constraint');
    expect(isDatabaseUnreachable(duplicate)).toBe(false);
    expect(isNotPrimary(duplicate)).toBe(false);
    expect(isNotPrimary('25006')).toBe(false);
  });
});
