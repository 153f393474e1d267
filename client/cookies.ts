/**
 * The cookies a load balancer sets on the WebSocket upgrade, kept so that every reconnect sends them back.
 * Phases 0 and 2 pin a peer to its node with a sticky cookie (phases/phase2/traefik.yml): a browser keeps
 * it by itself, a Node process keeps nothing, so without this jar every reconnect of a Node peer is a new
 * pick of the load balancer and lands where the peer's local rows (streams, clock, MCP) are not.
 *
 * A subset of RFC 6265 that is enough for load balancers: `name=value` with Path, Domain, Max-Age, Expires
 * and Secure; host-only cookies unless Domain names a suffix of the host. It is bounded (a server cannot
 * make a peer hold more than MAX_COOKIES cookies of MAX_COOKIE_BYTES each).
 */
export const MAX_COOKIES = 50;
export const MAX_COOKIE_BYTES = 4096;

interface StoredCookie {
  name: string;
  value: string;
  /** The host it was set by, or the Domain it names (then `hostOnly` is false). */
  domain: string;
  hostOnly: boolean;
  path: string;
  secure: boolean;
  /** Epoch ms; undefined for a session cookie (kept for the life of the client). */
  expiresAt: number | undefined;
}

export class CookieJar {
  private readonly cookies: StoredCookie[] = [];

  get size(): number {
    return this.cookies.length;
  }

  /** Stores the `Set-Cookie` headers of a response to `url`; malformed or oversized ones are ignored. */
  store(url: string, setCookie: string | string[] | undefined, now = Date.now()): void {
    if (setCookie === undefined) return;
    const target = new URL(url);
    for (const line of Array.isArray(setCookie) ? setCookie : [setCookie]) {
      const cookie = parseSetCookie(line, target, now);
      if (cookie) this.put(cookie, now);
    }
  }

  /** The `Cookie` header for a request to `url`, or undefined when no cookie applies. */
  header(url: string, now = Date.now()): string | undefined {
    this.dropExpired(now);
    const target = new URL(url);
    const secure = target.protocol === 'wss:' || target.protocol === 'https:';
    const host = target.hostname.toLowerCase();
    const matching = this.cookies.filter(
      (c) =>
        (c.hostOnly ? host === c.domain : host === c.domain || host.endsWith(`.${c.domain}`)) &&
        pathMatches(target.pathname, c.path) &&
        (secure || !c.secure),
    );
    if (matching.length === 0) return undefined;
    // RFC 6265 § 5.4: longer paths first.
    matching.sort((a, b) => b.path.length - a.path.length);
    return matching.map((c) => `${c.name}=${c.value}`).join('; ');
  }

  private put(cookie: StoredCookie, now: number): void {
    const same = this.cookies.findIndex(
      (c) => c.name === cookie.name && c.domain === cookie.domain && c.path === cookie.path,
    );
    if (same >= 0) this.cookies.splice(same, 1);
    // A Max-Age of 0 or an Expires in the past is how a server deletes a cookie.
    if (cookie.expiresAt !== undefined && cookie.expiresAt <= now) return;
    this.dropExpired(now);
    if (this.cookies.length >= MAX_COOKIES) this.cookies.shift(); // the oldest goes
    this.cookies.push(cookie);
  }

  private dropExpired(now: number): void {
    for (let i = this.cookies.length - 1; i >= 0; i--) {
      const expiresAt = this.cookies[i]!.expiresAt;
      if (expiresAt !== undefined && expiresAt <= now) this.cookies.splice(i, 1);
    }
  }
}

function parseSetCookie(line: string, target: URL, now: number): StoredCookie | undefined {
  if (line.length > MAX_COOKIE_BYTES) return undefined;
  const [pair = '', ...attributes] = line.split(';');
  const equals = pair.indexOf('=');
  if (equals <= 0) return undefined;
  const name = pair.slice(0, equals).trim();
  const value = pair.slice(equals + 1).trim();
  if (!name || /[\s;,=]/.test(name) || /[\s;,]/.test(value)) return undefined;
  const host = target.hostname.toLowerCase();
  const cookie: StoredCookie = {
    name,
    value,
    domain: host,
    hostOnly: true,
    path: defaultPath(target.pathname),
    secure: false,
    expiresAt: undefined,
  };
  let maxAgeSeen = false;
  for (const attribute of attributes) {
    const at = attribute.indexOf('=');
    const key = (at < 0 ? attribute : attribute.slice(0, at)).trim().toLowerCase();
    const argument = at < 0 ? '' : attribute.slice(at + 1).trim();
    if (key === 'max-age' && /^-?\d+$/.test(argument)) {
      maxAgeSeen = true;
      cookie.expiresAt = now + Number(argument) * 1000;
    } else if (key === 'expires' && !maxAgeSeen) {
      const at = Date.parse(argument);
      if (!Number.isNaN(at)) cookie.expiresAt = at;
    } else if (key === 'domain' && argument) {
      const domain = argument.replace(/^\./, '').toLowerCase();
      // A server may widen a cookie to its own parent domain, never to another host.
      if (host !== domain && !host.endsWith(`.${domain}`)) return undefined;
      cookie.domain = domain;
      cookie.hostOnly = false;
    } else if (key === 'path' && argument.startsWith('/')) cookie.path = argument;
    else if (key === 'secure') cookie.secure = true;
  }
  return cookie;
}

/** RFC 6265 § 5.1.4: the request path up to, not including, its last `/`. */
function defaultPath(pathname: string): string {
  const last = pathname.lastIndexOf('/');
  return last <= 0 ? '/' : pathname.slice(0, last);
}

function pathMatches(requestPath: string, cookiePath: string): boolean {
  if (requestPath === cookiePath) return true;
  if (!requestPath.startsWith(cookiePath)) return false;
  return cookiePath.endsWith('/') || requestPath[cookiePath.length] === '/';
}
