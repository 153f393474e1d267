/**
 * The member feed (durable messages), the Maelstrom/Kafka anomalies over `send`, `deliver` and `ack`:
 * - lost-write: a send that was `ok` never delivered to one of its intended recipients (any session);
 * - skip: such a loss between two deliveries of the same sender to that recipient (it saw n and a later
 *   m but never the n' in between that was sent to it) — always reported with its lost-write;
 * - duplicate: one messageId delivered twice to one recipient session (after the SDK's dedup), or one
 *   send (sender and seq) delivered to it under two messageIds (stored twice: the SDK cannot tell);
 * - internal-nonmonotonic: a recipient session sees a sender's seq go down (among `ok` sends);
 * - external-nonmonotonic: two recipients see two messages of one sender in opposite orders (one of
 *   them then also has an internal-nonmonotonic: this names the pair of recipients);
 * - acknowledged-never-delivered: a recipient acked a messageId its application never got.
 * Order is judged among `ok` sends only: a send whose reply never came is no promise, and if it was
 * stored after all it may arrive after later ones.
 */
import { type HistoryEvent, num, str, strings } from '../history/format.js';
import { type Anomalies, type Checker, short } from './anomalies.js';

interface Send {
  to: string[];
  invoke: number;
  ok?: number;
}

interface Arrival {
  seq: number;
  index: number;
}

export class FeedChecker implements Checker {
  readonly name = 'feed';
  /** By `from|seq`. */
  private readonly sends = new Map<string, Send>();
  /** First delivery index by `recipient|from|seq` (member level: any of its sessions). */
  private readonly delivered = new Map<string, number>();
  /** First delivery index by `session|messageId` and by `session|from|seq`, for duplicates. */
  private readonly bySession = new Map<string, number>();
  private readonly bySessionSeq = new Map<string, { index: number; messageId: string }>();
  /** messageIds each recipient member got, for acks: `recipient|messageId`. */
  private readonly deliveredIds = new Set<string>();
  /** Per `session|from` and per `recipient|from`: arrivals in history order. */
  private readonly sessionArrivals = new Map<string, Arrival[]>();
  private readonly memberArrivals = new Map<string, Arrival[]>();
  private readonly acks: Array<{ recipient: string; messageId: string; index: number }> = [];
  private deliveries = 0;

  add(event: HistoryEvent, line: number): void {
    if (event.f === 'send') this.send(event, line);
    else if (event.f === 'deliver' && event.type === 'ok') this.deliver(event, line);
    else if (event.f === 'ack' && event.type !== 'fail')
      this.acks.push({
        recipient: str(event, 'recipient', line),
        messageId: str(event, 'messageId', line),
        index: event.index,
      });
  }

  private send(event: HistoryEvent, line: number): void {
    const k = `${str(event, 'from', line)}|${num(event, 'seq', line)}`;
    const known = this.sends.get(k);
    if (event.type === 'invoke')
      this.sends.set(k, { to: strings(event, 'to', line), invoke: event.index, ...known });
    else if (event.type === 'ok') {
      const send = known ?? { to: strings(event, 'to', line), invoke: event.index };
      send.ok = event.index;
      this.sends.set(k, send);
    }
  }

  private deliver(event: HistoryEvent, line: number): void {
    this.deliveries++;
    const recipient = str(event, 'recipient', line);
    const from = str(event, 'from', line);
    const seq = num(event, 'seq', line);
    const messageId = str(event, 'messageId', line);
    const sessionKey = `${event.process}|${messageId}`;
    const first = this.bySession.get(sessionKey);
    if (first !== undefined) {
      this.duplicates.push([first, event.index, event.process, `messageId ${messageId} twice`]);
      return;
    }
    this.bySession.set(sessionKey, event.index);
    const seqKey = `${event.process}|${from}|${seq}`;
    const same = this.bySessionSeq.get(seqKey);
    if (same) {
      const what = `seq ${seq} from ${short(from)} twice (messageIds ${same.messageId}, ${messageId})`;
      this.duplicates.push([same.index, event.index, event.process, what]);
      return;
    }
    this.bySessionSeq.set(seqKey, { index: event.index, messageId });
    this.deliveredIds.add(`${recipient}|${messageId}`);
    const memberKey = `${recipient}|${from}|${seq}`;
    if (!this.delivered.has(memberKey)) {
      this.delivered.set(memberKey, event.index);
      push(this.memberArrivals, `${recipient}|${from}`, { seq, index: event.index });
    }
    push(this.sessionArrivals, `${event.process}|${from}`, { seq, index: event.index });
  }

  private readonly duplicates: Array<[number, number, string, string]> = [];

  finish(anomalies: Anomalies): string {
    for (const [first, again, session, what] of this.duplicates)
      anomalies.add('duplicate', `${session} got ${what}`, [first, again]);
    let ok = 0;
    for (const send of this.sends.values()) if (send.ok !== undefined) ok++;
    this.lostAndSkipped(anomalies);
    this.internalOrder(anomalies);
    this.externalOrder(anomalies);
    for (const ack of this.acks)
      if (!this.deliveredIds.has(`${ack.recipient}|${ack.messageId}`))
        anomalies.add(
          'acknowledged-never-delivered',
          `${short(ack.recipient)} acked ${ack.messageId}, which none of its sessions was given`,
          [ack.index],
        );
    return `${this.sends.size} sends (${ok} ok), ${this.deliveries} deliveries, ${this.acks.length} acks`;
  }

  private lostAndSkipped(anomalies: Anomalies): void {
    // Per recipient and sender: the seqs sent ok to it, in order, to tell a skip from a tail loss.
    const owed = new Map<string, number[]>();
    for (const [k, send] of this.sends) {
      if (send.ok === undefined) continue;
      const [from, seq] = splitKey(k);
      for (const recipient of send.to) push(owed, `${recipient}|${from}`, seq);
    }
    for (const [pair, seqs] of owed) {
      const [recipient, from] = pair.split('|') as [string, string];
      seqs.sort((a, b) => a - b);
      const got = seqs.map((s) => this.delivered.get(`${recipient}|${from}|${s}`));
      // The next delivered position after each one (a backwards pass: linear, however many are lost).
      const next = new Array<number>(seqs.length);
      for (let i = seqs.length - 1, seen = -1; i >= 0; i--) {
        next[i] = seen;
        if (got[i] !== undefined) seen = i;
      }
      let lastSeen = -1;
      for (let i = 0; i < seqs.length; i++) {
        if (got[i] !== undefined) {
          lastSeen = i;
          continue;
        }
        const send = this.sends.get(`${from}|${seqs[i]}`)!;
        const ops = [send.invoke, send.ok!];
        const what = `seq ${seqs[i]} from ${short(from)} to ${short(recipient)}`;
        anomalies.add('lost-write', `${what}: sent ok, never delivered`, ops);
        const after = next[i]!;
        if (lastSeen >= 0 && after > i)
          anomalies.add(
            'skip',
            `${what}: the recipient got seq ${seqs[lastSeen]} and seq ${seqs[after]} but not this one`,
            [got[lastSeen]!, ...ops, got[after]!],
          );
      }
    }
  }

  private internalOrder(anomalies: Anomalies): void {
    for (const [pair, arrivals] of this.sessionArrivals) {
      const [session, from] = pair.split('|') as [string, string];
      let highest: Arrival | undefined;
      for (const a of arrivals) {
        if (this.sends.get(`${from}|${a.seq}`)?.ok === undefined) continue;
        if (highest && a.seq < highest.seq)
          anomalies.add(
            'internal-nonmonotonic',
            `${session} got seq ${highest.seq} from ${short(from)}, then seq ${a.seq}`,
            [highest.index, a.index],
          );
        else highest = a;
      }
    }
  }

  /** Each inversion at one recipient checked against every other recipient of the pair (rare: cheap). */
  private externalOrder(anomalies: Anomalies): void {
    const reported = new Set<string>();
    for (const [pair, arrivals] of this.memberArrivals) {
      const [recipient, from] = pair.split('|') as [string, string];
      let highest: Arrival | undefined;
      for (const a of arrivals) {
        const send = this.sends.get(`${from}|${a.seq}`);
        if (send?.ok === undefined) continue;
        if (!highest || a.seq > highest.seq) {
          highest = a;
          continue;
        }
        const key = `${from}|${a.seq}|${highest.seq}`;
        if (reported.has(key)) continue;
        for (const other of send.to) {
          if (other === recipient) continue;
          const low = this.delivered.get(`${other}|${from}|${a.seq}`);
          const high = this.delivered.get(`${other}|${from}|${highest.seq}`);
          if (low === undefined || high === undefined || low > high) continue;
          reported.add(key);
          anomalies.add(
            'external-nonmonotonic',
            `seqs ${a.seq} and ${highest.seq} from ${short(from)}: ${short(other)} got them in that order, ${short(recipient)} in the other`,
            [low, high, highest.index, a.index],
          );
          break;
        }
      }
    }
  }
}

function push<T>(map: Map<string, T[]>, key: string, item: T): void {
  const list = map.get(key);
  if (list) list.push(item);
  else map.set(key, [item]);
}

function splitKey(k: string): [string, number] {
  const bar = k.lastIndexOf('|');
  return [k.slice(0, bar), Number(k.slice(bar + 1))];
}
