/**
 * Inbound frame parsing shared by every request: the envelope, and the field shapes that several frames
 * (and the HTTP bodies) use. A frame that fails its schema is answered with `bad_request` naming the field.
 * The request schemas themselves are in requests.ts.
 */
import { z } from 'zod';
import { ProtocolError } from './errors.js';

export const hex = (bytes: number) =>
  z.string().regex(new RegExp(`^[0-9a-f]{${bytes * 2}}$`), `must be ${bytes} bytes of lowercase hex`);
export const uuid = z
  .string()
  .regex(/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/, {
    message: 'must be a UUID',
  });
export const rid = z.string().max(128).optional();
/**
 * Text of a bounded length that Postgres can store: no NUL, no lone surrogate. WebSocket frames are
 * checked whole as they are parsed; HTTP bodies come through the framework's parser, so their text
 * fields say it themselves.
 */
export const storableText = (min: number, max: number) =>
  z
    .string()
    .min(min)
    .max(max)
    .refine(
      (value) => !LONE_SURROGATE_OR_NUL.test(value),
      'must be well-formed Unicode without NUL characters',
    );
/** A UUID field of a request, lowercased (ids are compared and used as keys in one spelling). */
export const idField = uuid.transform((value) => value.toLowerCase());
export const groupName = z
  .string()
  .regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1-64 letters, digits, "_", "." or "-"');

/** Where a message goes: a member pubkey, `*` (every other member) or `@group`. */
export const sendTarget = z.union([z.literal('*'), hex(32), z.string().regex(/^@[A-Za-z0-9_.-]{1,64}$/)], {
  message: 'must be a member pubkey (64 lowercase hex chars), "*" or "@group"',
});

/** The first problem zod found, phrased for an `error` frame: which field, and what is wrong with it. */
export function describe(error: z.ZodError, input: unknown): string {
  const issue = error.issues[0];
  if (!issue) return 'invalid frame';
  const path = issue.path.join('.');
  if (path && valueAt(input, issue.path) === undefined) return `missing field "${path}"`;
  return path ? `field "${path}" ${issue.message}` : issue.message;
}

function valueAt(input: unknown, path: PropertyKey[]): unknown {
  let value = input;
  for (const key of path) {
    if (typeof value !== 'object' || value === null) return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

/**
 * How deep a frame's JSON may nest. No frame of the protocol needs more than a few levels; a body is the
 * sender's own JSON, and 64 levels is far more than any sane document. Deeper input would make every
 * recursive step after it (the storable-text check, zod, Postgres's jsonb) exhaust its stack.
 */
export const MAX_JSON_DEPTH = 64;

/** Parses a text frame into a JSON object, or throws `bad_request`. */
export function parseJsonObject(text: string): Record<string, unknown> {
  if (nestingDepthExceeds(text, MAX_JSON_DEPTH)) {
    throw new ProtocolError('bad_request', `JSON nested deeper than ${MAX_JSON_DEPTH} levels`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ProtocolError('bad_request', 'invalid JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ProtocolError('bad_request', 'a frame must be a JSON object');
  }
  // Escapes can smuggle lone surrogates or NUL into strings, which Postgres text/jsonb cannot hold:
  // refuse them here, once, rather than fail later (and take other rows of a batch with them).
  if (text.includes('\\u') && !stringsAreStorable(value)) {
    throw new ProtocolError('bad_request', 'strings must be well-formed Unicode without NUL characters');
  }
  return value as Record<string, unknown>;
}

/**
 * Whether `text`'s brackets nest deeper than `max`, counted outside strings in one pass without parsing:
 * cheap enough for every frame, and it runs before anything recursive does.
 */
export function nestingDepthExceeds(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // a backslash: the next character is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}

const LONE_SURROGATE_OR_NUL = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]|\0/;

function stringsAreStorable(value: unknown): boolean {
  if (typeof value === 'string') return !LONE_SURROGATE_OR_NUL.test(value);
  if (Array.isArray(value)) return value.every(stringsAreStorable);
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).every(([key, item]) => stringsAreStorable(key) && stringsAreStorable(item));
  }
  return true;
}

/** The echo-able `rid` of a frame, if it carries a usable one. */
export function ridOf(frame: Record<string, unknown>): string | undefined {
  return typeof frame.rid === 'string' && frame.rid.length <= 128 ? frame.rid : undefined;
}

/** Parses `frame` with `schema`, or throws `bad_request` naming the first bad field. */
export function parseWith<S extends z.ZodType>(schema: S, frame: unknown): z.infer<S> {
  const result = schema.safeParse(frame);
  if (!result.success) throw new ProtocolError('bad_request', describe(result.error, frame));
  return result.data;
}
