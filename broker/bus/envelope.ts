/**
 * The bus envelope, version 2 (docs/design.md § The bus envelope): `{v, from, boot, n, kind, payload, ts,
 * mac}`, where `mac` is HMAC-SHA-256 under the cluster's BUS_SECRET over a canonical encoding of the channel it
 * is published on and every other field. Binding the channel means an envelope captured on one mesh's (or
 * node's) channel fails on any other; `ts` bounds how long a captured envelope is worth anything; the stamp
 * (`boot`, random per sender process, and `n`, that process's count of envelopes sent) lets a receiver
 * refuse one it has already had (bus/replay-guard.ts).
 *
 * This module only seals and opens: it knows nothing of kinds or payload shapes (bus/payload-schemas.ts).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export const ENVELOPE_VERSION = 2;

/** An envelope older (or further in the future) than this is refused as `stale`: the replay window. */
export const ENVELOPE_MAX_AGE_MS = 60_000;

/** The secrets a node holds: it seals with `current` and opens with either (a rotation in progress). */
export interface BusKeys {
  current: string;
  previous?: string | undefined;
}

/** Why an envelope was refused: the `reason` label of mesh_broker_bus_rejected_total. */
export type OpenFailure = 'bad_json' | 'unsigned' | 'unknown_version' | 'bad_mac' | 'stale';

/** Which envelope of which sender process: `n` grows with each envelope that process seals. */
export interface Stamp {
  boot: string;
  n: number;
}

export interface OpenedEnvelope {
  from: string;
  kind: string;
  payload: unknown;
  stamp: Stamp;
}

export type OpenResult = { ok: true; envelope: OpenedEnvelope } | { ok: false; reason: OpenFailure };

/**
 * The bytes the MAC covers: a JSON array, so no field can run into the next. The payload is re-encoded
 * from its parsed form on receipt; JSON.parse then JSON.stringify gives back the sender's text exactly
 * (same key order, same numbers), and anything else simply fails the check.
 */
function signedText(
  channel: string,
  v: number,
  from: string,
  stamp: Stamp,
  kind: string,
  ts: number,
  payload: unknown,
) {
  return JSON.stringify([channel, v, from, stamp.boot, stamp.n, kind, ts, payload]);
}

/** What a stamp may hold: a short token and a positive safe integer (anything else fails as `bad_mac`). */
function isStamp(boot: unknown, n: unknown): boolean {
  return (
    typeof boot === 'string' && /^[0-9a-f]{8,32}$/.test(boot) && Number.isSafeInteger(n) && (n as number) > 0
  );
}

function macOf(secret: string, text: string): Buffer {
  return createHmac('sha256', secret).update(text).digest();
}

/** The text to PUBLISH on `channel`. */
export function seal(
  keys: BusKeys,
  channel: string,
  message: OpenedEnvelope,
  now: number = Date.now(),
): string {
  const { from, kind, payload, stamp } = message;
  const mac = macOf(keys.current, signedText(channel, ENVELOPE_VERSION, from, stamp, kind, now, payload));
  return JSON.stringify({
    v: ENVELOPE_VERSION,
    from,
    boot: stamp.boot,
    n: stamp.n,
    kind,
    payload,
    ts: now,
    mac: mac.toString('base64url'),
  });
}

/** The envelope received on `channel`, once its version, MAC and age are checked; why not otherwise. */
export function open(keys: BusKeys, channel: string, text: string, now: number = Date.now()): OpenResult {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, reason: 'bad_json' };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    return { ok: false, reason: 'bad_json' };
  const fields = parsed as Record<string, unknown>;
  if (fields.mac === undefined && fields.v === undefined) return { ok: false, reason: 'unsigned' };
  if (fields.v !== ENVELOPE_VERSION) return { ok: false, reason: 'unknown_version' };
  const { from, boot, n, kind, ts, payload, mac } = fields;
  if (typeof mac !== 'string') return { ok: false, reason: 'unsigned' };
  if (typeof from !== 'string' || typeof kind !== 'string' || typeof ts !== 'number' || !isStamp(boot, n))
    return { ok: false, reason: 'bad_mac' };
  const stamp = { boot: boot as string, n: n as number };
  const given = Buffer.from(mac, 'base64url');
  const signed = signedText(channel, ENVELOPE_VERSION, from, stamp, kind, ts, payload);
  if (!matches(keys, signed, given)) return { ok: false, reason: 'bad_mac' };
  // Checked after the MAC, so an unsigned sender cannot learn anything from it, and a node's clock skew
  // shows as `stale`, never as `bad_mac`.
  if (Math.abs(now - ts) > ENVELOPE_MAX_AGE_MS) return { ok: false, reason: 'stale' };
  return { ok: true, envelope: { from, kind, payload, stamp } };
}

function matches(keys: BusKeys, text: string, given: Buffer): boolean {
  for (const secret of [keys.current, keys.previous]) {
    if (secret === undefined) continue;
    const expected = macOf(secret, text);
    if (given.length === expected.length && timingSafeEqual(given, expected)) return true;
  }
  return false;
}
