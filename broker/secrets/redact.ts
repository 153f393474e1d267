/**
 * Keeping secrets out of what a node prints (issue 25): URLs are shown without their password, and every
 * log line is scrubbed of the secret values the process was given, whatever wrote them (a library's error
 * message, a serialized error's fields), so a new log call cannot leak one by mistake.
 */
import { SECRET_VARIABLES } from './files.js';

type Env = Record<string, string | undefined>;

export const REDACTED = '[redacted]';

/** `url` with its password replaced (the user name stays: it is no secret); a non-URL with an "@" is hidden whole. */
export function redactUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url.includes('@') ? REDACTED : url;
  }
  if (parsed.password !== '') parsed.password = 'xxxxx';
  return parsed.toString();
}

/** Secrets shorter than this are not scrubbed from text: they would mangle ordinary words. */
const MIN_SCRUBBED_LENGTH = 4;

/**
 * The secret strings in `env` (resolved: X, not X_FILE): each secret variable's value, and the password
 * of each URL it holds, raw and percent-decoded (a library may print either).
 */
export function secretValues(env: Env): string[] {
  const found = new Set<string>();
  for (const name of SECRET_VARIABLES) {
    const value = env[name];
    if (value === undefined || value === '') continue;
    found.add(value);
    for (const entry of value.split(',')) {
      try {
        const { password } = new URL(entry.trim());
        if (password === '') continue;
        found.add(password);
        found.add(decodeURIComponent(password));
      } catch {
        // not a URL: the whole value is the secret
      }
    }
  }
  return [...found]
    .filter((secret) => secret.length >= MIN_SCRUBBED_LENGTH)
    .sort((a, b) => b.length - a.length);
}

/** `text` with every one of `secrets` replaced by [redacted] (longest first, so no part of one survives). */
export function scrub(text: string, secrets: readonly string[]): string {
  let result = text;
  for (const secret of secrets) if (result.includes(secret)) result = result.replaceAll(secret, REDACTED);
  return result;
}
