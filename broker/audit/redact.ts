/**
 * What `audit.query` shows a member of other members' entries (docs/audit.md § Privacy). A watch URL
 * may carry secrets (an API key in its query string, credentials, a token in its path); another member
 * sees only where it points: scheme, host and port. The stored row is never changed, so the chain still
 * verifies (`audit.verify` and `workbench audit verify` read the rows, not this view).
 */
import type { AuditEntry } from '../../protocol/frames.js';

/** Events whose payload `url` is the member's private data. */
const PRIVATE_URL_EVENTS = new Set(['watch.created']);

/** A URL reduced to its origin (`https://host:port`); text that is not a URL becomes a placeholder. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return parsed.origin === 'null' ? '[redacted]' : `${parsed.origin}/[redacted]`;
  } catch {
    return '[redacted]';
  }
}

/**
 * The entry as `viewer` (a member pubkey) may see it: its own entries whole, another member's private
 * fields redacted and the entry marked `redacted: true` (its hash is the stored row's, so it cannot be
 * recomputed from the redacted payload).
 */
export function redactFor(viewer: string, entry: AuditEntry): AuditEntry {
  if (entry.actor === viewer || !PRIVATE_URL_EVENTS.has(entry.eventType)) return entry;
  const payload = entry.payload as Record<string, unknown> | null;
  if (typeof payload?.url !== 'string') return entry;
  return { ...entry, payload: { ...payload, url: redactUrl(payload.url) }, redacted: true };
}
