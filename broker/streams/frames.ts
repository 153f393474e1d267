import {
  streamListFrame,
  streamPublishFrame,
  streamSubscribeFrame,
  streamUnsubscribeFrame,
} from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { BrokerMetrics } from '../metrics.js';
import { streamPageRequest } from './limits.js';
import type { Streams } from './streams.js';

/** The stream frames (docs/protocol.md § Streams) over whichever Streams implementation the node runs. */
export function registerStreamFrames(router: FrameRoutes, streams: Streams, metrics: BrokerMetrics): void {
  router.on('stream.subscribe', streamSubscribeFrame, async (frame, { identity }) => {
    const { position, replay } = await streams.subscribe(identity, frame.stream, frame.since);
    // The missed publishes follow the reply: the gateway sends it in the microtasks after this handler
    // resolves, before the next macrotask runs the replay (which then lets the held live frames go).
    setImmediate(replay);
    return { type: 'stream.subscribed', stream: frame.stream, ...position };
  });
  router.on('stream.unsubscribe', streamUnsubscribeFrame, async (frame, { identity }) => {
    await streams.unsubscribe(identity, frame.stream);
    return { type: 'stream.unsubscribed', stream: frame.stream };
  });
  // Pipelined: a publish is placed (the history's script, sent in the socket's order) without waiting for
  // the previous one's round trip, so a fast publisher's positions share Redis's pipeline; replies keep
  // their order, and the offsets their publishes' order.
  router.pipelined('stream.publish', streamPublishFrame, async (frame, { identity }) => {
    const published = streams.publish(identity, frame.stream, frame.data);
    const later = published.then(() => {
      metrics.streamPublishes.inc();
      return frame.rid === undefined
        ? undefined
        : { type: 'stream.published' as const, stream: frame.stream };
    });
    return { later };
  });
  // One bounded page; without a cursor the first, which is the whole list of a small mesh.
  router.on('stream.list', streamListFrame, async (frame, { identity }) => ({
    type: 'stream.list_result',
    ...(await streams.list(identity.meshId, streamPageRequest(frame))),
  }));
}
