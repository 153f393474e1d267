/**
 * Refuses a bus envelope this node has already had (docs/design.md § The bus envelope): the MAC proves who
 * sealed an envelope, not that it is new, and anyone who can read a channel can publish a captured one again.
 *
 * Each sender process stamps its envelopes with its `boot` (random) and a count `n` that only grows. Redis
 * delivers one publisher connection's messages on a channel in order (a sharded channel lives on one master;
 * a region's copy is made over one connection too), so on one channel the stamps of one sender process
 * arrive in increasing order: an envelope whose `n` is not above the last one seen there is a replay (or a
 * copy that lost the race, which the bus may drop: it is a hint). Gaps are lost messages, which is fine.
 *
 * Bounded: a (channel, sender, boot) not heard from for twice the envelope's age limit is forgotten, which is
 * safe because every envelope it could replay is `stale` by then (each was received within the age limit of
 * its `ts`, no later than the last one seen); past MAX_TRACKED the oldest is forgotten early, and a replay of
 * that one would get through until it is stale (docs say so).
 */
import { ENVELOPE_MAX_AGE_MS, type Stamp } from './envelope.js';

/** (channel, sender, boot) triples remembered; a node's channels × the cluster's sender processes. */
export const MAX_TRACKED = 100_000;
/** How long a triple is remembered after its last envelope. */
const FORGET_AFTER_MS = 2 * ENVELOPE_MAX_AGE_MS;

interface Last {
  n: number;
  seenAt: number;
}

export class ReplayGuard {
  /** In the order last heard from (re-inserted on each envelope), so the oldest are at the front. */
  private readonly last = new Map<string, Last>();

  constructor(private readonly maxTracked = MAX_TRACKED) {}

  /** True for an envelope not had before on `channel` (and remembers it); false for a replay. */
  admit(channel: string, from: string, stamp: Stamp, now: number = Date.now()): boolean {
    const key = `${channel}\n${from}\n${stamp.boot}`;
    const seen = this.last.get(key);
    if (seen !== undefined && stamp.n <= seen.n) return false;
    this.last.delete(key);
    this.last.set(key, { n: stamp.n, seenAt: now });
    this.forgetOld(now);
    return true;
  }

  get size(): number {
    return this.last.size;
  }

  private forgetOld(now: number): void {
    for (const [key, seen] of this.last) {
      if (this.last.size <= this.maxTracked && now - seen.seenAt <= FORGET_AFTER_MS) return;
      this.last.delete(key);
    }
  }
}
