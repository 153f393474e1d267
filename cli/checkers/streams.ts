/**
 * Streams, at most once by design (docs/streams.md: a frame may be lost, never repeated or reordered):
 * from `stream-publish` (by the publisher: stream, publisher, seq) and `stream-receive` (by a subscriber
 * session: stream, publisher, seq),
 * - stream-duplicate: one subscriber session got one publish twice;
 * - stream-reorder: a subscriber session got a publisher's seq lower than one it already had (among
 *   publishes that were `ok`, as for the feed).
 * Losses are not anomalies here (the summary gives publishes and receives).
 */
import { type HistoryEvent, num, str } from '../history/format.js';
import type { Anomalies, Checker } from './anomalies.js';

export class StreamChecker implements Checker {
  readonly name = 'streams';
  /** `stream|publisher|seq` of publishes that were ok. */
  private readonly published = new Set<string>();
  /** First receive index by `subscriber|stream|publisher|seq`. */
  private readonly received = new Map<string, number>();
  /** Per `subscriber|stream|publisher`: seqs and indexes in arrival order. */
  private readonly arrivals = new Map<string, Array<[number, number]>>();
  private readonly duplicates: Array<[string, number[]]> = [];
  private receives = 0;

  add(event: HistoryEvent, line: number): void {
    if (event.f === 'stream-publish' && event.type === 'ok')
      this.published.add(
        `${str(event, 'stream', line)}|${str(event, 'publisher', line)}|${num(event, 'seq', line)}`,
      );
    else if (event.f === 'stream-receive' && event.type === 'ok') this.receive(event, line);
  }

  private receive(event: HistoryEvent, line: number): void {
    this.receives++;
    const stream = `${str(event, 'stream', line)}|${str(event, 'publisher', line)}`;
    const seq = num(event, 'seq', line);
    const k = `${event.process}|${stream}|${seq}`;
    const first = this.received.get(k);
    if (first !== undefined) {
      this.duplicates.push([
        `${event.process} got ${stream.replace('|', ' from ')} seq ${seq} twice`,
        [first, event.index],
      ]);
      return;
    }
    this.received.set(k, event.index);
    const list = this.arrivals.get(`${event.process}|${stream}`);
    if (list) list.push([seq, event.index]);
    else this.arrivals.set(`${event.process}|${stream}`, [[seq, event.index]]);
  }

  finish(anomalies: Anomalies): string {
    for (const [message, ops] of this.duplicates) anomalies.add('stream-duplicate', message, ops);
    for (const [key, list] of this.arrivals) {
      const stream = key.slice(key.indexOf('|') + 1);
      let highest: [number, number] | undefined;
      for (const arrival of list) {
        if (!this.published.has(`${stream}|${arrival[0]}`)) continue;
        if (highest && arrival[0] < highest[0])
          anomalies.add(
            'stream-reorder',
            `${key.slice(0, key.indexOf('|'))} got seq ${highest[0]}, then seq ${arrival[0]} (${stream.replace('|', ' from ')})`,
            [highest[1], arrival[1]],
          );
        else highest = arrival;
      }
    }
    return `${this.published.size} publishes ok, ${this.receives} receives (at most once: losses allowed)`;
  }
}
