/**
 * The delivery checker of `workbench load`: a pure ledger of what senders had accepted and what every
 * recipient's listeners saw. It knows nothing of sockets, so a constructed event log can prove that it
 * really detects loss, duplicates and reordering (tests/unit/load-checker.test.ts).
 *
 * Keys: a message is (sender, channel, seq). `seq` grows per sender and channel in the order the sender
 * issued them, one at a time (the generator keeps one request in flight per peer), so for every recipient
 * the seqs it sees from one sender on one channel must grow too. Durable messages (`message`) and stream
 * frames (`stream`) are separate channels: the broker orders each, not the two against each other.
 */

export type Channel = 'message' | 'stream';
/** `group`: a send to `@group`, owed to every other member of the mesh in that group (judged like a DM). */
export type Kind = 'dm' | 'broadcast' | 'group' | 'stream';

interface Accepted {
  kind: Kind;
  sentAt: number;
  /** Recipients still owed it. */
  pending: Set<string>;
}

export interface Problem {
  what: 'lost' | 'duplicate' | 'reordered';
  kind: Kind | 'unknown';
  sender: string;
  recipient: string;
  seq: number;
}

export interface CheckerResult {
  accepted: Record<Kind, number>;
  /** Deliveries every accepted message owed, summed over recipients. */
  expectedDeliveries: number;
  delivered: number;
  lost: number;
  duplicates: number;
  reordered: number;
  /** Deliveries of messages whose acceptance the sender never heard (a timeout, say): not judged. */
  unconfirmed: number;
  /** Latency of each first delivery (ms), by kind, in arrival order. */
  latencies: Record<Kind, number[]>;
  /** The first few problems, for the report. */
  examples: Problem[];
}

const key = (sender: string, channel: Channel, seq: number) => `${sender}|${channel}|${seq}`;
const channelOf = (kind: Kind): Channel => (kind === 'stream' ? 'stream' : 'message');
const MAX_EXAMPLES = 10;

export class DeliveryChecker {
  private readonly accepted = new Map<string, Accepted>();
  /** Per recipient and (sender, channel): every seq seen, to tell a duplicate from a first delivery. */
  private readonly seen = new Map<string, Set<number>>();
  /** Per recipient and (sender, channel): seqs in the order they first arrived. */
  private readonly arrivals = new Map<string, number[]>();
  /** Deliveries that came before the sender heard its `sent` (same process: either may come first). */
  private readonly early = new Map<string, Array<{ recipient: string; at: number }>>();
  private readonly counts = { delivered: 0, duplicates: 0, unconfirmed: 0 };
  private readonly acceptedByKind: Record<Kind, number> = { dm: 0, broadcast: 0, group: 0, stream: 0 };
  private expected = 0;
  private readonly latencies: Record<Kind, number[]> = { dm: [], broadcast: [], group: [], stream: [] };
  private readonly examples: Problem[] = [];

  /** The sender heard that the broker accepted this message for these recipients. */
  accept(message: { sender: string; kind: Kind; seq: number; sentAt: number; recipients: string[] }): void {
    const k = key(message.sender, channelOf(message.kind), message.seq);
    const pending = new Set(message.recipients);
    this.accepted.set(k, { kind: message.kind, sentAt: message.sentAt, pending });
    this.acceptedByKind[message.kind]++;
    this.expected += pending.size;
    for (const { recipient, at } of this.early.get(k) ?? []) this.settle(k, recipient, at);
    this.early.delete(k);
  }

  /** A recipient's listener saw a message (after the SDK's duplicate filter). */
  receive(event: { recipient: string; sender: string; channel: Channel; seq: number; at: number }): void {
    const { recipient, sender, channel, seq } = event;
    const stream = `${recipient}|${sender}|${channel}`;
    let seen = this.seen.get(stream);
    if (!seen) {
      seen = new Set();
      this.seen.set(stream, seen);
    }
    const kindOf = () => this.accepted.get(key(sender, channel, seq))?.kind ?? 'unknown';
    if (seen.has(seq)) {
      this.counts.duplicates++;
      this.problem({ what: 'duplicate', kind: kindOf(), sender, recipient, seq });
      return;
    }
    seen.add(seq);
    const arrivals = this.arrivals.get(stream) ?? [];
    arrivals.push(seq);
    this.arrivals.set(stream, arrivals);
    const k = key(sender, channel, seq);
    if (this.accepted.has(k)) this.settle(k, recipient, event.at);
    else {
      const early = this.early.get(k) ?? [];
      early.push({ recipient, at: event.at });
      this.early.set(k, early);
    }
  }

  /** Deliveries still owed (for the drain wait). */
  outstanding(): number {
    return this.expected - this.counts.delivered;
  }

  result(): CheckerResult {
    let lost = 0;
    const examples = [...this.examples];
    // Order is judged at the end, among accepted messages only: a send whose reply never came (its
    // node died) is no promise, and if it was stored after all it may arrive after later ones.
    let reordered = 0;
    for (const [stream, arrivals] of this.arrivals) {
      const [recipient, sender, channel] = stream.split('|') as [string, string, Channel];
      let highest = -1;
      for (const seq of arrivals) {
        const message = this.accepted.get(key(sender, channel, seq));
        if (!message) continue;
        if (seq < highest) {
          reordered++;
          if (examples.length < MAX_EXAMPLES)
            examples.push({ what: 'reordered', kind: message.kind, sender, recipient, seq });
        } else highest = seq;
      }
    }
    for (const [k, message] of this.accepted) {
      for (const recipient of message.pending) {
        lost++;
        const [sender, , seq] = k.split('|');
        if (examples.length < MAX_EXAMPLES)
          examples.push({ what: 'lost', kind: message.kind, sender: sender!, recipient, seq: Number(seq) });
      }
    }
    let unconfirmed = this.counts.unconfirmed;
    for (const list of this.early.values()) unconfirmed += list.length;
    return {
      accepted: { ...this.acceptedByKind },
      expectedDeliveries: this.expected,
      delivered: this.counts.delivered,
      lost,
      duplicates: this.counts.duplicates,
      reordered,
      unconfirmed,
      latencies: this.latencies,
      examples,
    };
  }

  private settle(k: string, recipient: string, at: number): void {
    const message = this.accepted.get(k)!;
    // A recipient that was not meant to get it (not in the accepted set) is not a delivery we owed.
    if (!message.pending.delete(recipient)) {
      this.counts.unconfirmed++;
      return;
    }
    this.counts.delivered++;
    this.latencies[message.kind].push(at - message.sentAt);
  }

  private problem(problem: Problem): void {
    if (this.examples.length < MAX_EXAMPLES) this.examples.push(problem);
  }
}
