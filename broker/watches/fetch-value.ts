import { createHash } from 'node:crypto';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { WatchMode } from '../../protocol/requests.js';
import { assertLiteralAllowed, guardedLookup, parseTarget } from './address-guard.js';

/**
 * What a poll reduces the response to (`watch.create`'s mode): its status code, a body digest, or a (part
 * of a) JSON body.
 */
export type { WatchMode };

export interface FetchOptions {
  timeoutMs: number;
  maxBytes: number;
  allowPrivate: boolean;
}

/** When a new value is worth a notification. */
export type NotifyOn =
  | { kind: 'change' }
  | { kind: 'match'; value: string }
  | { kind: 'not_match'; value: string };

const USER_AGENT = 'mesh-broker-watch/1';

interface HttpResult {
  status: number;
  body: Buffer;
}

/**
 * One bounded GET: no connection reuse (each poll re-runs the address guard), no redirects, a deadline
 * over the whole exchange including the body, and a body cap so a hostile server cannot exhaust memory.
 */
function get(target: URL, readBody: boolean, options: FetchOptions): Promise<HttpResult> {
  return new Promise((resolve, reject) => {
    const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
    const request = send(target, {
      method: 'GET',
      agent: false,
      headers: { 'user-agent': USER_AGENT, accept: '*/*' },
      lookup: guardedLookup(options.allowPrivate),
    });
    let settled = false;
    const timer = setTimeout(
      () => fail(new Error(`request timed out after ${options.timeoutMs} ms`)),
      options.timeoutMs,
    );
    function fail(error: Error): void {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(error);
      request.destroy();
    }
    function succeed(result: HttpResult): void {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(result);
    }
    const tooLarge = () => new Error(`response larger than ${options.maxBytes} bytes`);

    request.on('error', fail);
    request.on('response', (response: IncomingMessage) => {
      const status = response.statusCode ?? 0;
      if (!readBody) {
        succeed({ status, body: Buffer.alloc(0) });
        request.destroy();
        return;
      }
      const declared = Number(response.headers['content-length']);
      if (Number.isFinite(declared) && declared > options.maxBytes) {
        fail(tooLarge());
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      response.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > options.maxBytes) fail(tooLarge());
        else chunks.push(chunk);
      });
      response.on('end', () => succeed({ status, body: Buffer.concat(chunks, size) }));
      response.on('error', fail);
      response.on('close', () => {
        if (!response.complete) fail(new Error('connection closed before the response was complete'));
      });
    });
    request.end();
  });
}

/** Recursively sorts object keys so that equal documents always serialise to the same text. */
function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    const record = value as Record<string, unknown>;
    // fromEntries defines own properties, so a "__proto__" key stays data instead of a prototype.
    return Object.fromEntries(
      Object.keys(record)
        .sort()
        .map((key) => [key, sortKeys(record[key])]),
    );
  }
  return value;
}

/** Strings come back bare so that notifyOn `match:X` compares against X without JSON quotes. */
function canonicalJson(value: unknown): string {
  if (typeof value === 'string') return value;
  return JSON.stringify(sortKeys(value));
}

/** Splits an extract path into steps, or returns why its syntax is invalid. */
function parsePath(path: string): string[] | { error: string } {
  let rest = path;
  if (rest.startsWith('$')) {
    rest = rest.slice(1);
    if (rest === '') return [];
    if (rest.startsWith('.')) rest = rest.slice(1);
    else if (!rest.startsWith('['))
      return { error: `extract path "${path}" must continue with "." after "$"` };
  }
  if (rest === '') return { error: `extract path "${path}" is empty` };
  const steps: string[] = [];
  for (const piece of rest.split('.')) {
    const match = /^([^[\]]*)((?:\[\d+\])*)$/.exec(piece);
    if (!match) return { error: `extract path "${path}" has a malformed index in "${piece}"` };
    const name = match[1] ?? '';
    const indexes = [...(match[2] ?? '').matchAll(/\[(\d+)\]/g)].map((index) => index[1] ?? '');
    if (name === '' && indexes.length === 0) return { error: `extract path "${path}" has an empty segment` };
    if (name !== '') steps.push(name);
    steps.push(...indexes);
  }
  return steps;
}

/** Returns an error message for an invalid extract path, or undefined when it is usable. */
export function validateExtract(path: string): string | undefined {
  const parsed = parsePath(path);
  return Array.isArray(parsed) ? undefined : parsed.error;
}

/**
 * Walks a parsed JSON document along a dot path (`data.items.0.price`, `$.items[0].price`). Numeric
 * steps index arrays; only own properties are followed, so `__proto__` and friends never resolve.
 */
export function extractPath(document: unknown, path: string): unknown {
  const steps = parsePath(path);
  if (!Array.isArray(steps)) throw new Error(steps.error);
  let current = document;
  for (const step of steps) {
    if (Array.isArray(current) && /^\d+$/.test(step) && Number(step) < current.length) {
      current = current[Number(step)];
    } else if (
      current !== null &&
      typeof current === 'object' &&
      !Array.isArray(current) &&
      Object.hasOwn(current, step)
    ) {
      current = (current as Record<string, unknown>)[step];
    } else {
      throw new Error(`extract path "${path}" not found`);
    }
  }
  return current;
}

function jsonValue(body: Buffer, extract: string | undefined): string {
  let document: unknown;
  try {
    document = JSON.parse(body.toString('utf8').replace(/^\uFEFF/, ''));
  } catch {
    throw new Error('response is not JSON');
  }
  return canonicalJson(extract === undefined ? document : extractPath(document, extract));
}

/**
 * Performs one poll of a watch and reduces the response to the string that is compared between polls.
 * In `hash` and `json` modes a non-2xx status is an error rather than a value, so an outage or redirect
 * page is not mistaken for a content change (use `status` mode to watch the status itself).
 * `extract` only applies to `json` mode.
 */
export async function fetchWatchValue(
  url: string,
  mode: WatchMode,
  extract: string | undefined,
  options: FetchOptions,
): Promise<string> {
  const target = parseTarget(url);
  assertLiteralAllowed(target, options.allowPrivate);
  const { status, body } = await get(target, mode !== 'status', options);
  if (mode === 'status') return String(status);
  if (status < 200 || status > 299) throw new Error(`unexpected HTTP status ${status}`);
  if (mode === 'hash') return createHash('sha256').update(body).digest('hex');
  return jsonValue(body, extract);
}

/** Parses a watch's notifyOn setting: "change" (default), "match:X" or "not_match:X". */
export function parseNotifyOn(text: string | undefined): NotifyOn {
  if (text === undefined || text === 'change') return { kind: 'change' };
  for (const kind of ['match', 'not_match'] as const) {
    const prefix = `${kind}:`;
    if (text.startsWith(prefix)) {
      const value = text.slice(prefix.length);
      if (value === '') throw new Error(`notifyOn "${text}" needs a value after "${prefix}"`);
      return { kind, value };
    }
  }
  throw new Error(`notifyOn must be "change", "match:<value>" or "not_match:<value>", not "${text}"`);
}

/**
 * Decides whether a poll result notifies. `change` only compares against a recorded baseline (the first
 * poll never notifies); `match`/`not_match` notify on entering the state they describe, including on
 * the first poll, and stay quiet while the state persists.
 */
export function shouldNotify(rule: NotifyOn, previous: string | undefined, current: string): boolean {
  switch (rule.kind) {
    case 'change':
      return previous !== undefined && previous !== current;
    case 'match':
      return current === rule.value && previous !== rule.value;
    case 'not_match':
      return current !== rule.value && (previous === undefined || previous === rule.value);
  }
}
