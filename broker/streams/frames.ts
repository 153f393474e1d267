import {
  streamListFrame,
  streamPublishFrame,
  streamSubscribeFrame,
  streamUnsubscribeFrame,
} from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { BrokerMetrics } from '../metrics.js';
import type { Streams } from './streams.js';

/** The stream frames (docs/protocol.md § Streams) over whichever Streams implementation the node runs. */
export function registerStreamFrames(router: FrameRoutes, streams: Streams, metrics: BrokerMetrics): void {
  router.on('stream.subscribe', streamSubscribeFrame, async (frame, { identity }) => {
    await streams.subscribe(identity, frame.stream);
    return { type: 'stream.subscribed', stream: frame.stream };
  });
  router.on('stream.unsubscribe', streamUnsubscribeFrame, async (frame, { identity }) => {
    await streams.unsubscribe(identity, frame.stream);
    return { type: 'stream.unsubscribed', stream: frame.stream };
  });
  router.on('stream.publish', streamPublishFrame, async (frame, { identity }) => {
    await streams.publish(identity, frame.stream, frame.data);
    metrics.streamPublishes.inc();
    return frame.rid === undefined ? undefined : { type: 'stream.published', stream: frame.stream };
  });
  router.on('stream.list', streamListFrame, async (_frame, { identity }) => ({
    type: 'stream.list_result',
    streams: await streams.list(identity.meshId),
  }));
}
