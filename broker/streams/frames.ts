import { z } from 'zod';
import type { BrokerMetrics } from '../metrics.js';
import { rid } from '../protocol/frames.js';
import type { Router } from '../ws/router.js';
import type { Streams } from './streams.js';

const streamName = z
  .string()
  .regex(/^[A-Za-z0-9_.:/-]{1,128}$/, 'must be 1-128 letters, digits or _ . : / -');

const subscribeFrame = z.object({ type: z.literal('stream.subscribe'), stream: streamName, rid });
const unsubscribeFrame = z.object({ type: z.literal('stream.unsubscribe'), stream: streamName, rid });
const publishFrame = z.object({
  type: z.literal('stream.publish'),
  stream: streamName,
  data: z.unknown().refine((value) => value !== undefined, 'is required'),
  rid,
});
const listFrame = z.object({ type: z.literal('stream.list'), rid });

/** The stream frames (PROTOCOL.md § Streams) over whichever Streams implementation the node runs. */
export function registerStreamFrames(router: Router, streams: Streams, metrics: BrokerMetrics): void {
  router.on('stream.subscribe', subscribeFrame, async (frame, { identity }) => {
    await streams.subscribe(identity, frame.stream);
    return { type: 'stream.subscribed', stream: frame.stream };
  });
  router.on('stream.unsubscribe', unsubscribeFrame, async (frame, { identity }) => {
    await streams.unsubscribe(identity, frame.stream);
    return { type: 'stream.unsubscribed', stream: frame.stream };
  });
  router.on('stream.publish', publishFrame, async (frame, { identity }) => {
    await streams.publish(identity, frame.stream, frame.data);
    metrics.streamPublishes.inc();
    return frame.rid === undefined ? undefined : { type: 'stream.published', stream: frame.stream };
  });
  router.on('stream.list', listFrame, async (_frame, { identity }) => ({
    type: 'stream.list_result',
    streams: await streams.list(identity.meshId),
  }));
}
