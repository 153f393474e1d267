/**
 * URL watches (docs/protocol.md § URL watches: a watch notifies each change of the value it watches, once:
 * `watch.triggered` is a durable message, owed and acked like one). From `watch-change` (the target took
 * `value` at `url`, recorded before it is served), `watch-create` and `watch-fire` (by each session of the
 * watching member that got a `watch.triggered`: `watchId, url, oldValue, newValue, messageId`):
 * - watch-phantom-fire: a notification whose `newValue` the url never had before it, or whose `oldValue`
 *   (when not null) was not an earlier value of the url: it fired for no change that happened;
 * - watch-fired-twice: one change (`watchId`, `newValue`; every value is new) notified as two messageIds;
 * - watch-duplicate: one session given one notification (messageId) twice (after the SDK's dedup).
 * A change undone before the next poll is not notified (the protocol says so): a change never notified is
 * counted in the summary, not judged.
 */
import { type HistoryEvent, str } from '../history/format.js';
import type { Anomalies, Checker } from './anomalies.js';

export class WatchChecker implements Checker {
  readonly name = 'watches';
  /** Per url: value → its position in the url's sequence and the index of its `watch-change`. */
  private readonly values = new Map<string, Map<string, { position: number; index: number }>>();
  /** Per `watchId|newValue`: messageId → first fire index. */
  private readonly changes = new Map<string, Map<string, number>>();
  /** `session|messageId` → first fire index. */
  private readonly bySession = new Map<string, number>();
  private readonly found: Array<[string, string, number[]]> = [];
  private created = 0;
  private fires = 0;

  add(event: HistoryEvent, line: number): void {
    if (event.type !== 'ok') return;
    if (event.f === 'watch-change') {
      const url = str(event, 'url', line);
      const values = this.values.get(url) ?? new Map();
      values.set(str(event, 'value', line), { position: values.size, index: event.index });
      this.values.set(url, values);
    } else if (event.f === 'watch-create') this.created++;
    else if (event.f === 'watch-fire') this.fire(event, line);
  }

  private fire(event: HistoryEvent, line: number): void {
    this.fires++;
    const messageId = str(event, 'messageId', line);
    const watchId = str(event, 'watchId', line);
    const url = str(event, 'url', line);
    const session = `${event.process}|${messageId}`;
    const first = this.bySession.get(session);
    if (first !== undefined) {
      this.found.push([
        'watch-duplicate',
        `${event.process} got notification ${messageId} twice`,
        [first, event.index],
      ]);
      return;
    }
    this.bySession.set(session, event.index);
    const newValue = event.value.newValue;
    const oldValue = event.value.oldValue;
    const values = this.values.get(url);
    const next = typeof newValue === 'string' ? values?.get(newValue) : undefined;
    const prev = typeof oldValue === 'string' ? values?.get(oldValue) : undefined;
    const what = `watch ${watchId} of ${url} notified ${JSON.stringify(oldValue)} → ${JSON.stringify(newValue)}`;
    if (!next || next.index > event.index)
      this.found.push(['watch-phantom-fire', `${what}: the url never had that value before`, [event.index]]);
    else if (oldValue !== null && (!prev || prev.position >= next.position))
      this.found.push([
        'watch-phantom-fire',
        `${what}: the old value is no earlier value of the url`,
        [...(prev ? [prev.index] : []), next.index, event.index],
      ]);
    const key = `${watchId}|${JSON.stringify(newValue)}`;
    const ids = this.changes.get(key) ?? new Map<string, number>();
    if (!ids.has(messageId)) ids.set(messageId, event.index);
    this.changes.set(key, ids);
  }

  finish(anomalies: Anomalies): string {
    for (const [kind, message, ops] of this.found) anomalies.add(kind, message, ops);
    for (const [key, ids] of this.changes)
      if (ids.size > 1) {
        const [watchId, value] = [key.slice(0, key.indexOf('|')), key.slice(key.indexOf('|') + 1)];
        anomalies.add(
          'watch-fired-twice',
          `watch ${watchId}'s change to ${value} notified as ${ids.size} messages (${[...ids.keys()].join(', ')})`,
          [...ids.values()],
        );
      }
    let changes = 0;
    for (const values of this.values.values()) changes += values.size;
    return `${this.created} watches created ok, ${changes} changes, ${this.changes.size} notified, ${this.fires} fire events`;
  }
}
