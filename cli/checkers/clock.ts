/**
 * The mesh clock: per observer session, from `clock-tick` (ok: mesh, epoch, tick), every tick larger than
 * the one before it (never repeated, never back) and one epoch at a time (never a tick of an older epoch
 * after one of a newer): clock-nonincreasing, clock-epoch-regress. Gaps are allowed (a lost tick is never
 * resent). Observers are judged apart: two sessions' arrivals are not ordered against each other. The first
 * tick after an observer's `session-welcome` (it moved) may repeat: the tick in flight, sent by both nodes.
 */
import { type HistoryEvent, num, str } from '../history/format.js';
import type { Anomalies, Checker } from './anomalies.js';

interface Last {
  tick: number;
  epoch: number;
  index: number;
}

export class ClockChecker implements Checker {
  readonly name = 'clock';
  private readonly last = new Map<string, Last>();
  private readonly epochs = new Set<string>();
  private readonly found: Array<[string, string, number[]]> = [];
  private ticks = 0;

  /** Observers whose session moved (a `session-welcome` after their first tick) since their last tick. */
  private readonly moved = new Set<string>();

  add(event: HistoryEvent, line: number): void {
    if (event.f === 'session-welcome') {
      const observer = `${str(event, 'mesh', line)} ${event.process}`;
      if (this.last.has(observer)) this.moved.add(observer);
      return;
    }
    if (event.f !== 'clock-tick' || event.type !== 'ok') return;
    this.ticks++;
    const observer = `${str(event, 'mesh', line)} ${event.process}`;
    const now = { tick: num(event, 'tick', line), epoch: num(event, 'epoch', line), index: event.index };
    this.epochs.add(`${event.value.mesh}|${now.epoch}`);
    const before = this.last.get(observer);
    this.last.set(observer, now);
    // The first tick after a move may repeat the tick in flight: the node left and the node joined both sent it.
    const afterMove = this.moved.delete(observer);
    if (!before) return;
    const what = `${event.process}: tick ${before.tick} (epoch ${before.epoch}) then tick ${now.tick} (epoch ${now.epoch})`;
    if (now.tick <= before.tick && !afterMove)
      this.found.push(['clock-nonincreasing', what, [before.index, now.index]]);
    if (now.epoch < before.epoch) this.found.push(['clock-epoch-regress', what, [before.index, now.index]]);
  }

  finish(anomalies: Anomalies): string {
    for (const [kind, message, ops] of this.found) anomalies.add(kind, message, ops);
    return `${this.ticks} ticks seen by ${this.last.size} observers over ${this.epochs.size} mesh epochs`;
  }
}
