/**
 * Cross-site request forgery on loopback: the console's cookie is SameSite=Strict, but every page served
 * from 127.0.0.1 or localhost is the same *site* whatever its port (ports do not count for SameSite). A
 * page of another local server (another account's, a dev server's) could make the operator's browser POST
 * to the console with the cookie attached: a form, or `fetch(…, {mode: 'no-cors'})` with a text/plain
 * body, which needs no preflight. So every state-changing request must show it comes from the console's
 * own origin, which browsers tell in `Origin` (sent with every non-GET request), else in
 * `Sec-Fetch-Site`, else in `Referer`.
 */
import type { IncomingHttpHeaders } from 'node:http';

/** Methods that only read: anything else changes state and must come from the console's own origin. */
const SAFE_METHODS = new Set(['GET', 'HEAD']);

export function changesState(method: string): boolean {
  return !SAFE_METHODS.has(method.toUpperCase());
}

/** How a request proved who it is: the browser's cookie, or the admin token a script sends itself. */
export type Credential = 'cookie' | 'admin-token';

const first = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value);

function originOf(url: string): string | undefined {
  try {
    return new URL(url).origin;
  } catch {
    return undefined;
  }
}

/**
 * Why a state-changing request is refused (403), or undefined when it may go on. `ownOrigins` are the
 * console's origins (`http://127.0.0.1:<port>`, `http://localhost:<port>`).
 *
 * A browser attaches the cookie by itself, so a cookie-only request with none of the three headers is
 * refused: every browser this page supports sends `Origin` on a POST. The admin token is never attached by
 * a browser (the page does not hold it), so a script presenting it may send none of them; any header it
 * does send must still name the console.
 */
export function crossOriginRefusal(
  headers: IncomingHttpHeaders,
  ownOrigins: readonly string[],
  credential: Credential,
): string | undefined {
  const own = ownOrigins.join(' or ');
  const origin = first(headers.origin);
  if (origin !== undefined)
    return ownOrigins.includes(origin)
      ? undefined
      : `refused: this request comes from ${origin}, not from the console (${own})`;
  const fetchSite = first(headers['sec-fetch-site']);
  if (fetchSite !== undefined)
    return fetchSite === 'same-origin'
      ? undefined
      : `refused: this request comes from another page (Sec-Fetch-Site: ${fetchSite}), not from the console (${own})`;
  const referer = first(headers.referer);
  if (referer !== undefined) {
    const from = originOf(referer);
    return from !== undefined && ownOrigins.includes(from)
      ? undefined
      : `refused: this request comes from ${from ?? 'an unreadable Referer'}, not from the console (${own})`;
  }
  if (credential === 'admin-token') return undefined;
  return `refused: a change needs an Origin header naming the console (${own}); scripts send the admin token instead`;
}
