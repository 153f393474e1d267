/**
 * What a verified envelope may carry (docs/design.md § The bus envelope): which kinds each channel type
 * takes, and the shape of each kind's payload. A relay hands a payload to sockets only after it passed
 * here, so a presence relay can only ever forward a `peer.*` frame, a clock relay a `clock.tick`, a stream
 * relay a `stream.data`: whatever else a sender put in the payload fails its kind's schema.
 */
import { z } from 'zod';
import { hex, uuid } from '../../protocol/parse.js';
import { MESSAGE_ID_PATTERN, streamEpoch, streamName } from '../../protocol/requests.js';
import type { BusKind, BusPayloads } from './messages.js';

export type ChannelType = 'mesh' | 'node';

/** The kinds each channel type carries; any other kind on it is refused as `kind_not_allowed`. */
export const KINDS_BY_CHANNEL: Record<ChannelType, ReadonlySet<BusKind>> = {
  mesh: new Set<BusKind>(['delivery.wake', 'presence.event', 'clock.tick', 'member.revoked', 'stream.data']),
  node: new Set<BusKind>([
    'delivery.wake',
    'presence.kick',
    'mcp.invoke',
    'mcp.result',
    'member.revoked.closed',
  ]),
};

const count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
const id = z.number().int().positive().max(Number.MAX_SAFE_INTEGER);
const sessionId = uuid;
const pubkey = hex(32);
const name = z.string().max(128);
const token = z.string().min(1).max(128);

const peerJoined = z.strictObject({
  type: z.literal('peer.joined'),
  pubkey,
  sessionId,
  name: name.nullable(),
});
const peerLeft = z.strictObject({ type: z.literal('peer.left'), pubkey, sessionId });
const peerStatus = z.strictObject({
  type: z.literal('peer.status'),
  pubkey,
  sessionId,
  status: z.string().max(1024),
});

const SCHEMAS: { [K in BusKind]: z.ZodType<BusPayloads[K]> } = {
  'delivery.wake': z.strictObject({
    // A hint: a feed writes it only once its own read from Postgres shows the row (delivery/feed.ts).
    frame: z.looseObject({
      type: z.enum(['message', 'watch.triggered']),
      messageId: z.string().regex(MESSAGE_ID_PATTERN),
      sentAt: z.string().max(64),
    }),
    // [memberId, seq] per recipient of one message.
    seqs: z.array(z.tuple([id, id])).max(100_000),
    publishedAt: count,
  }),
  'presence.event': z.discriminatedUnion('type', [peerJoined, peerLeft, peerStatus]),
  'presence.kick': z.strictObject({ sessionId }),
  'clock.tick': z.strictObject({
    type: z.literal('clock.tick'),
    tick: count,
    simTime: z.string().max(64),
    speed: z.number().finite(),
    epoch: count,
  }),
  'member.revoked': z.strictObject({ memberId: id, reportTo: token.optional() }),
  'member.revoked.closed': z.strictObject({ memberId: id, node: token, closed: count }),
  'stream.data': z.strictObject({
    type: z.literal('stream.data'),
    stream: streamName,
    data: z.unknown(),
    from: pubkey,
    fromSession: sessionId,
    // Its place in the stream (absent with STREAM_POSITIONS=off): receivers find gaps by it.
    offset: id.optional(),
    epoch: streamEpoch.optional(),
    publishedAt: count,
  }),
  'mcp.invoke': z.strictObject({
    invokeId: token,
    callerNode: token,
    hostSession: sessionId,
    server: token,
    frame: z.strictObject({
      type: z.literal('mcp.invoke'),
      callId: token,
      server: token,
      tool: token,
      args: z.unknown(),
      caller: pubkey,
    }),
  }),
  'mcp.result': z.strictObject({
    invokeId: token,
    outcome: z.strictObject({ result: z.unknown().optional(), error: z.string().optional() }),
  }),
};

export type PayloadCheck =
  | { ok: true; kind: BusKind; payload: unknown }
  | { ok: false; reason: 'kind_not_allowed' | 'bad_payload' };

/** `payload` of `kind` as received on a channel of `type`, or why it is refused. */
export function checkPayload(type: ChannelType, kind: string, payload: unknown): PayloadCheck {
  if (!KINDS_BY_CHANNEL[type].has(kind as BusKind)) return { ok: false, reason: 'kind_not_allowed' };
  const parsed = SCHEMAS[kind as BusKind].safeParse(payload);
  if (!parsed.success) return { ok: false, reason: 'bad_payload' };
  return { ok: true, kind: kind as BusKind, payload: parsed.data };
}
