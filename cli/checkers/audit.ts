/**
 * Audit chains: per chain (`audit-append` info: mesh, seq, hash, prevHash), one linear chain:
 * - audit-fork: two entries with one seq;
 * - audit-gap: a seq missing between the chain's first and last;
 * - audit-rewrite: an entry whose prevHash is not the hash of the entry before it (a link rewritten).
 * The first entry's prevHash is not judged (a chain may start from a rebaseline). Hashes themselves are
 * not recomputed here: that is `workbench audit verify`; this judges the chain's shape from the history.
 */
import { type HistoryEvent, num, str } from '../history/format.js';
import type { Anomalies, Checker } from './anomalies.js';

interface Entry {
  seq: number;
  hash: string;
  prevHash: string;
  index: number;
}

export class AuditChecker implements Checker {
  readonly name = 'audit';
  private readonly chains = new Map<string, Entry[]>();
  private entries = 0;

  add(event: HistoryEvent, line: number): void {
    if (event.f !== 'audit-append' || event.type === 'fail') return;
    this.entries++;
    const mesh = str(event, 'mesh', line);
    const entry = {
      seq: num(event, 'seq', line),
      hash: str(event, 'hash', line),
      prevHash: str(event, 'prevHash', line),
      index: event.index,
    };
    const chain = this.chains.get(mesh);
    if (chain) chain.push(entry);
    else this.chains.set(mesh, [entry]);
  }

  finish(anomalies: Anomalies): string {
    for (const [mesh, chain] of this.chains) {
      chain.sort((a, b) => a.seq - b.seq || a.index - b.index);
      for (let i = 1; i < chain.length; i++) {
        const [before, entry] = [chain[i - 1]!, chain[i]!];
        if (entry.seq === before.seq)
          anomalies.add('audit-fork', `chain ${mesh}: two entries with seq ${entry.seq}`, [
            before.index,
            entry.index,
          ]);
        else if (entry.seq > before.seq + 1)
          anomalies.add(
            'audit-gap',
            `chain ${mesh}: seq ${before.seq} then seq ${entry.seq} (${entry.seq - before.seq - 1} missing)`,
            [before.index, entry.index],
          );
        else if (entry.prevHash !== before.hash)
          anomalies.add(
            'audit-rewrite',
            `chain ${mesh}: seq ${entry.seq}'s prevHash is not seq ${before.seq}'s hash`,
            [before.index, entry.index],
          );
      }
    }
    return `${this.chains.size} chains, ${this.entries} entries`;
  }
}
