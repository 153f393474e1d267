/**
 * What a checker found: each anomaly a kind (the Jepsen/Maelstrom name where there is one), a sentence,
 * and the `index` of every history event involved. Kept per kind up to a bound (the count goes on), so a
 * badly broken history still checks in bounded memory for the report.
 */
import type { HistoryEvent } from '../history/format.js';

export interface Anomaly {
  kind: string;
  message: string;
  /** The `index` of each history event involved, in history order. */
  operations: number[];
}

/** Anomalies kept in full per kind; the rest are counted. */
export const MAX_PER_KIND = 20;

export class Anomalies {
  readonly kept: Anomaly[] = [];
  readonly counts = new Map<string, number>();

  add(kind: string, message: string, operations: number[]): void {
    const n = (this.counts.get(kind) ?? 0) + 1;
    this.counts.set(kind, n);
    if (n <= MAX_PER_KIND)
      this.kept.push({ kind, message, operations: [...operations].sort((a, b) => a - b) });
  }

  get total(): number {
    let total = 0;
    for (const n of this.counts.values()) total += n;
    return total;
  }
}

/** A checker: fed every event in history order, then asked for its verdict once. */
export interface Checker {
  readonly name: string;
  add(event: HistoryEvent, line: number): void;
  /** Judges what it was fed; returns a one-line summary of what it judged. */
  finish(anomalies: Anomalies): string;
}

/** A short form of a public key or id for messages. */
export const short = (id: string) => (id.length > 12 ? `${id.slice(0, 12)}…` : id);
