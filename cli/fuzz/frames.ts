/**
 * Bad WebSocket frames, generated from a seed: malformed JSON, truncated frames, wrong shapes, missing and
 * wrongly typed fields of every frame type, unknown types, binary and oversized frames, and frames out of
 * order (before the hello, a second hello, answers to calls that were never made). Each says how the broker
 * must answer it: with an `error` frame, or by closing the socket.
 */
import type { Random } from './random.js';

/** A UUID made from the seed's bytes, so a replay sends the very same frames. */
function uuid(random: Random): string {
  const hex = random.bytes(16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

export interface BadFrame {
  /** What kind of bad, for the report. */
  kind: string;
  data: string | Buffer;
  binary?: boolean;
  /** Sent before the hello, on a fresh socket. */
  beforeHello?: boolean;
  /** `error`: an error frame (any code but `internal`); `close`: the socket is closed (1009 when oversized). */
  expect: 'error' | 'close';
}

type Template = { frame: Record<string, unknown>; required: string[] };

/** One well-formed frame per type, with the fields whose absence or wrong type must be refused. */
function templates(random: Random, peer: string): Template[] {
  const id = uuid(random);
  return [
    { frame: { type: 'send', id: 'f1', to: peer, body: 'x' }, required: ['id', 'to', 'body'] },
    { frame: { type: 'ack', messageId: '1-0123456789abcdef' }, required: ['messageId'] },
    { frame: { type: 'stream.subscribe', stream: 's' }, required: ['stream'] },
    { frame: { type: 'stream.unsubscribe', stream: 's' }, required: ['stream'] },
    { frame: { type: 'stream.publish', stream: 's', data: 1 }, required: ['stream'] },
    { frame: { type: 'clock.set', speed: 10 }, required: ['speed'] },
    {
      frame: {
        type: 'mcp.register',
        server: 's',
        description: '',
        tools: [{ name: 't', description: '', inputSchema: {} }],
      },
      required: ['server', 'tools'],
    },
    { frame: { type: 'mcp.unregister', server: 's' }, required: ['server'] },
    {
      frame: { type: 'mcp.call', callId: 'c', server: 's', tool: 't', args: {} },
      required: ['callId', 'server', 'tool'],
    },
    { frame: { type: 'mcp.result', callId: 'c', result: 1 }, required: ['callId'] },
    {
      frame: { type: 'schedule.create', to: peer, body: 'x', at: 4_102_444_800_000 },
      required: ['to', 'body'],
    },
    { frame: { type: 'schedule.cancel', scheduleId: id }, required: ['scheduleId'] },
    {
      frame: { type: 'watch.create', url: 'https://example.com/', mode: 'hash', intervalSec: 60 },
      required: ['url', 'mode', 'intervalSec'],
    },
    { frame: { type: 'watch.delete', watchId: id }, required: ['watchId'] },
    { frame: { type: 'audit.query', limit: 10 }, required: [] },
  ];
}

/** Values of the wrong type for any field: whatever the field is, one of these is not it. */
const WRONG_VALUES: unknown[] = [null, true, -1, 1.5, 1e308, '', [], {}, [1, 2], { nested: { deep: [] } }];

function wrongValueFor(current: unknown, random: Random): unknown {
  for (;;) {
    const candidate = random.pick(WRONG_VALUES);
    if (typeof candidate !== typeof current || Array.isArray(candidate) !== Array.isArray(current))
      return candidate;
  }
}

/** The generators, each one kind of bad frame. */
const KINDS: Array<(random: Random, peer: string, maxFrameBytes: number) => BadFrame> = [
  (random) => ({
    kind: 'random bytes',
    data: random.bytes(random.int(1, 200)).toString('latin1'),
    expect: 'error',
  }),
  (random, peer) => {
    const text = JSON.stringify(random.pick(templates(random, peer)).frame);
    return { kind: 'truncated JSON', data: text.slice(0, random.int(1, text.length - 1)), expect: 'error' };
  },
  (random) => ({
    kind: 'JSON that is not an object',
    data: JSON.stringify(random.pick([[], [1], 'send', 42, null, true, [{ type: 'send' }]])),
    expect: 'error',
  }),
  (random) => ({
    kind: 'unknown or ill-typed type',
    data: JSON.stringify({ type: random.pick(['nope', '', 'SEND', 'x'.repeat(500), 7, null, ['send']]) }),
    expect: 'error',
  }),
  (random, peer) => {
    const { frame, required } = random.pick(templates(random, peer).filter((t) => t.required.length > 0));
    const missing = random.pick(required);
    const { [missing]: _, ...rest } = frame;
    return {
      kind: `${frame.type} without ${missing}`,
      data: JSON.stringify({ ...rest, rid: 'r' }),
      expect: 'error',
    };
  },
  (random, peer) => {
    const { frame, required } = random.pick(templates(random, peer).filter((t) => t.required.length > 0));
    const field = random.pick(required);
    const bad = { ...frame, [field]: wrongValueFor(frame[field], random), rid: 'r' };
    return {
      kind: `${frame.type} with a wrongly typed ${field}`,
      data: JSON.stringify(bad),
      expect: 'error',
    };
  },
  (random, peer) => {
    // Strings Postgres cannot store and lone surrogates: refused, never a database error.
    const { frame } = random.pick(templates(random, peer).slice(0, 1));
    const poison = random.pick(['a\u0000b', '\ud800', 'x\udfffy']);
    return {
      kind: 'NUL or lone surrogate in a string',
      data: JSON.stringify({ ...frame, body: poison }),
      expect: 'error',
    };
  },
  (random, peer) => ({
    kind: 'frame before the hello',
    data: JSON.stringify(random.pick(templates(random, peer)).frame),
    beforeHello: true,
    expect: 'error',
  }),
  (random) => ({
    kind: 'a second hello',
    data: JSON.stringify({
      type: 'hello',
      v: 1,
      meshId: uuid(random),
      pubkey: 'ab',
      sessionId: uuid(random),
      ts: 0,
      nonce: '00',
      sig: '00',
    }),
    expect: 'error',
  }),
  (random) => ({
    kind: 'schedule.cancel of a schedule that does not exist',
    data: JSON.stringify({ type: 'schedule.cancel', scheduleId: uuid(random), rid: 'r' }),
    expect: 'error',
  }),
  (random) => ({
    kind: 'watch.delete of a watch that does not exist',
    data: JSON.stringify({ type: 'watch.delete', watchId: uuid(random), rid: 'r' }),
    expect: 'error',
  }),
  () => ({
    kind: 'mcp.call of a server nobody hosts',
    data: JSON.stringify({ type: 'mcp.call', callId: 'c', server: 'none', tool: 't', args: {}, rid: 'r' }),
    expect: 'error',
  }),
  (random) => ({
    kind: 'binary frame',
    data: random.bytes(random.int(1, 64)),
    binary: true,
    expect: 'error',
  }),
  (random, _peer, maxFrameBytes) => ({
    kind: 'oversized frame',
    data: JSON.stringify({
      type: 'send',
      id: 'big',
      to: 'x',
      body: 'y'.repeat(maxFrameBytes + random.int(1, 4096)),
    }),
    expect: 'close',
  }),
];

/** The `count` bad frames of a seed, in order: the same seed, the same frames. */
export function badFrames(random: Random, count: number, peer: string, maxFrameBytes = 65_536): BadFrame[] {
  return Array.from({ length: count }, () => {
    // Oversized frames cost a socket each: one in fifty.
    const generators = random.int(0, 49) === 0 ? KINDS.slice(-1) : KINDS.slice(0, -1);
    return random.pick(generators)(random, peer, maxFrameBytes);
  });
}
