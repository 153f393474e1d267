/**
 * What the lossy Redis proxy (lossy-redis-proxy.ts) loses: the decision, for each complete publish the
 * request parser (resp-request-parser.ts) hands it, whether it is dropped or passed on. One seeded draw per
 * publish that could be dropped (eligible, loss on, channel matching), so the same publishes in the same
 * order meet the same fate; the rate can change at runtime. Counts every publish and its fate.
 */
import { Random } from '../fuzz/random.js';
import type { PublishPolicy } from './resp-request-parser.js';

/** Which channels a publish may be dropped on: a substring, a pattern, or a predicate. */
export type ChannelFilter = string | RegExp | ((channel: string) => boolean);

export interface PublishLossOptions {
  /** Share of the matching publishes dropped, from 0 to 1 (default 0). */
  lossRate?: number;
  /** Seed of the drop decisions (default 1). */
  seed?: number;
  /** Only publishes to channels that match can be dropped (default: every channel). */
  channels?: ChannelFilter;
}

export interface PublishLossCounts {
  /** PUBLISH / SPUBLISH commands seen (any channel), forwarded to Redis, and dropped. */
  publishes: number;
  forwarded: number;
  dropped: number;
}

function matcherOf(filter: ChannelFilter | undefined): (channel: string) => boolean {
  if (filter === undefined) return () => true;
  if (typeof filter === 'string') return (channel) => channel.includes(filter);
  if (filter instanceof RegExp) return (channel) => filter.test(channel);
  return filter;
}

function checkRate(rate: number): number {
  if (!Number.isFinite(rate) || rate < 0 || rate > 1)
    throw new RangeError(`lossRate must be from 0 to 1, not ${rate}`);
  return rate;
}

export class PublishLoss {
  private rate: number;
  private readonly random: Random;
  private readonly matches: (channel: string) => boolean;
  private readonly counts: PublishLossCounts = { publishes: 0, forwarded: 0, dropped: 0 };

  /** Throws a RangeError on a rate outside 0 to 1. */
  constructor(options: PublishLossOptions) {
    this.rate = checkRate(options.lossRate ?? 0);
    this.random = new Random(options.seed ?? 1);
    this.matches = matcherOf(options.channels);
  }

  /** The share of matching publishes dropped from now on (0 to 1). */
  get lossRate(): number {
    return this.rate;
  }

  set lossRate(rate: number) {
    this.rate = checkRate(rate);
  }

  stats(): PublishLossCounts {
    return { ...this.counts };
  }

  /** The parser's policy: true drops the publish (one seeded draw when it may be dropped). */
  readonly decide: PublishPolicy = (channel, eligible) => {
    this.counts.publishes++;
    const drop =
      eligible && this.rate > 0 && this.matches(channel.toString()) && this.random.next() < this.rate;
    if (drop) this.counts.dropped++;
    else this.counts.forwarded++;
    return drop;
  };
}
