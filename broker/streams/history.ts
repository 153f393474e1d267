/**
 * A stream's positions and bounded history (issue 28, item 4; docs/design.md § Stream positions): every
 * publish gets the next `offset` of its (mesh, stream) and the stream's `epoch`, and is kept for recovery
 * while the bounds allow (STREAM_HISTORY_SIZE publishes, STREAM_HISTORY_TTL_MS, STREAM_HISTORY_BYTES).
 * The epoch changes whenever what was kept is lost (a Redis restart or flush, a node restart for the
 * memory history, a stream forgotten for the node-wide byte bound): the same epoch means the same history.
 * Two implementations: in this node's memory (history.memory.ts, the local row) and in Redis
 * (history.redis.ts, `ha.streams`).
 */
import type { StreamData } from '../../protocol/frames.js';

/** A publish before it has a place: what `append` stores. */
export type UnplacedFrame = Omit<StreamData, 'offset' | 'epoch'>;

/** A publish with its place. */
export type PlacedFrame = UnplacedFrame & { offset: number; epoch: string };

export interface HistoryRead {
  epoch: string;
  /** The stream's top: the offset of its newest publish (0 before the first). */
  offset: number;
  /** The oldest offset still held (`offset + 1` when none is). */
  first: number;
  /** The held publishes with an offset above the read's `after`, in order. */
  frames: PlacedFrame[];
}

export interface HistoryBounds {
  /** Publishes kept per stream. */
  size: number;
  /** How long one is kept. */
  ttlMs: number;
  /** Bytes of one stream's history. */
  bytes: number;
}

export interface StreamHistory {
  /** Places the publish (next offset, current epoch) and keeps it; one atomic step per publish. */
  append(meshId: string, frame: UnplacedFrame): Promise<PlacedFrame>;
  /**
   * The stream's epoch and top, and (with `after`) the publishes held above it. A stream never published
   * gets its epoch here (offset 0), so a subscriber's first position is one a later publish continues.
   */
  read(meshId: string, stream: string, after?: number): Promise<HistoryRead>;
  /** The tops of many streams at once (the periodic position check); null where a stream has none. */
  tops(
    streams: Array<{ meshId: string; stream: string }>,
  ): Promise<Array<{ epoch: string; offset: number } | null>>;
}

/** The one text a stored publish is kept as (its bytes are what the byte bounds count). */
export function storedText(frame: UnplacedFrame): string {
  return JSON.stringify({
    type: frame.type,
    stream: frame.stream,
    data: frame.data,
    from: frame.from,
    fromSession: frame.fromSession,
  });
}
