/**
 * The bounds of streams (issue 17), the same in every implementation: how many subscriptions one session
 * may hold, and how a `stream.list` reply is paged.
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { StreamInfo } from '../../protocol/frames.js';
import { STREAM_LIST_MAX_STREAMS } from '../../protocol/requests.js';

/**
 * Throws `limit_exceeded` when a session holding `held` subscriptions (not `stream`) would pass `max` by
 * one more; subscribing again to a stream it already has is no new subscription.
 */
export function assertCanSubscribe(held: number, alreadySubscribed: boolean, max: number): void {
  if (alreadySubscribed || held < max) return;
  throw new ProtocolError('limit_exceeded', `a session may hold at most ${max} stream subscriptions`);
}

export interface StreamPageRequest {
  /** List streams whose name comes after this one (the previous page's `next`). */
  after: string | undefined;
  /** At most this many streams (≤ STREAM_LIST_MAX_STREAMS). */
  limit: number;
}

/**
 * One page of `stream.list`: bounded by construction, as a stream name is at most 128 ASCII characters,
 * a page of STREAM_LIST_MAX_STREAMS is under 100 KiB of JSON.
 */
export interface StreamListPage {
  streams: StreamInfo[];
  /** The cursor of the next page; absent on the last page. */
  next?: string;
}

export function streamPageRequest(frame: { cursor?: string; limit?: number }): StreamPageRequest {
  return {
    after: frame.cursor,
    limit: Math.min(frame.limit ?? STREAM_LIST_MAX_STREAMS, STREAM_LIST_MAX_STREAMS),
  };
}

/**
 * A page from up to `limit + 1` streams in name order after the cursor: the extra one only says that
 * another page follows.
 */
export function pageOf(streams: StreamInfo[], limit: number): StreamListPage {
  if (streams.length <= limit) return { streams };
  const page = streams.slice(0, limit);
  return { streams: page, next: page[page.length - 1]!.name };
}

/** Code-unit order of names (ASCII by the name rule), the same as SQL's "C" collation. */
export function byName(a: StreamInfo, b: StreamInfo): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}
