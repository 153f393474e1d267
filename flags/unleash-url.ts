/**
 * Unleash URLs as operators write them. The README and the environment files write the API root
 * (`http://host:4242/api`), Unleash's own docs often the server root (`http://host:4242`); both name the
 * same server, so both are accepted, and every caller builds its paths from the one form returned here.
 */

/** The server's API root, `…/api`, whether `url` ends in `/api` or not (a base path is kept). */
export function unleashApiRoot(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`Unleash URL "${url}" is not a URL (expected e.g. http://unleash:4242/api)`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    throw new Error(`Unleash URL "${url}" must be http or https`);
  if (parsed.search || parsed.hash)
    throw new Error(`Unleash URL "${url}" must not have a query or a fragment`);
  const path = parsed.pathname.replace(/\/+$/, '');
  parsed.pathname = path.endsWith('/api') ? path : `${path}/api`;
  return parsed.toString().replace(/\/+$/, '');
}
