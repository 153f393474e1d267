/**
 * The body of a `watch.triggered` notification, bounded by MAX_BODY_BYTES like any `send`. A poll may
 * yield a value of up to WATCH_MAX_BYTES (1 MiB by default, a whole JSON document); such a value is
 * stored as its digest, its size and a bounded excerpt instead (docs/protocol.md § URL watches).
 */
import { createHash } from 'node:crypto';
import type { WatchValueDigest } from '../../protocol/frames.js';

export type WatchValue = string | WatchValueDigest;

export interface WatchNotificationFields {
  watchId: string;
  url: string;
  oldValue: WatchValue | null;
  newValue: WatchValue;
}

/** The first `maxBytes` UTF-8 bytes of `text`, never splitting a character. */
export function utf8Prefix(text: string, maxBytes: number): string {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= maxBytes) return text;
  let end = maxBytes;
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--; // back off a continuation byte
  return bytes.subarray(0, end).toString('utf8');
}

/** `value` itself when it has at most `maxBytes` UTF-8 bytes, else its digest form with an excerpt that long. */
export function boundedValue(value: string, maxBytes: number): WatchValue {
  return Buffer.byteLength(value, 'utf8') <= maxBytes ? value : digestOf(value, maxBytes);
}

function digestOf(value: string, excerptBytes: number): WatchValueDigest {
  return {
    sha256: createHash('sha256').update(value, 'utf8').digest('hex'),
    bytes: Buffer.byteLength(value, 'utf8'),
    excerpt: utf8Prefix(value, excerptBytes),
  };
}

/**
 * The notification's JSON, at most `maxBodyBytes` bytes: values carried whole when everything fits,
 * else each value longer than the excerpt budget as a digest. The budget starts at an even share of the
 * body and halves until the JSON (whose escaping can grow an excerpt up to sixfold) fits.
 */
export function notificationBody(
  watchId: string,
  url: string,
  oldValue: string | null,
  newValue: string,
  maxBodyBytes: number,
): string {
  const render = (fields: WatchNotificationFields) => JSON.stringify(fields);
  const whole = render({ watchId, url, oldValue, newValue });
  if (Buffer.byteLength(whole, 'utf8') <= maxBodyBytes) return whole;
  for (let excerptBytes = Math.floor(maxBodyBytes / 2); ; excerptBytes = Math.floor(excerptBytes / 2)) {
    const body = render({
      watchId,
      url,
      oldValue: oldValue === null ? null : boundedValue(oldValue, excerptBytes),
      newValue: boundedValue(newValue, excerptBytes),
    });
    // An excerpt of 0 bytes leaves digests and the URL (≤ 2048 characters): fits any sane MAX_BODY_BYTES.
    if (Buffer.byteLength(body, 'utf8') <= maxBodyBytes || excerptBytes === 0) return body;
  }
}
