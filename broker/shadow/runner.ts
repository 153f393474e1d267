/**
 * Runs one row's comparator while its flag is `shadow` (docs/flags.md § Shadow): hears each call the
 * row's local implementation answered (broker/rows/switch.ts), hands it to the comparator off the peer's
 * path (one comparison at a time per row, at most MAX_QUEUED waiting: beyond, calls are not compared and
 * are counted as skipped), counts the outcome (`mesh_broker_shadow_comparisons_total{flag,outcome}`) and
 * keeps the last MAX_MISMATCHES mismatches for the admin API and the console.
 */
import type { FlagKey } from '../../flags/registry.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import { planted } from '../plants.js';
import {
  canonical,
  diverge,
  type RowShadow,
  refusalCode,
  type ShadowMismatch,
  type ShadowOutcome,
  type ShadowSample,
} from './shadow.js';

export const MAX_MISMATCHES = 50;
const MAX_QUEUED = 1000;

export interface ShadowReport {
  flag: FlagKey;
  running: boolean;
  agree: number;
  disagree: number;
  error: number;
  skipped: number;
  /** agree ÷ (agree + disagree + error) since the node started; null before the first comparison. */
  agreementRatio: number | null;
  mismatches: ShadowMismatch[];
}

export class ShadowRunner {
  private running = false;
  private queue: Promise<void> = Promise.resolve();
  private queued = 0;
  private readonly counts: Record<ShadowOutcome | 'skipped', number> = {
    agree: 0,
    disagree: 0,
    error: 0,
    skipped: 0,
  };
  private readonly mismatches: ShadowMismatch[] = [];
  private readonly observed: ReadonlySet<string>;
  private readonly refusalsCompared: ReadonlySet<string>;

  constructor(
    readonly flag: FlagKey,
    private readonly shadow: RowShadow,
    private readonly metrics: BrokerMetrics,
    private readonly log: Logger,
  ) {
    this.observed = new Set(shadow.observes);
    this.refusalsCompared = new Set(shadow.comparesRefusals ?? []);
  }

  get active(): boolean {
    return this.running;
  }

  /** Starts or stops the comparator (the reconciler, after the row's move). */
  async set(on: boolean): Promise<void> {
    if (on === this.running) return;
    if (on) {
      await this.shadow.start();
      this.running = true;
    } else {
      this.running = false;
      await this.queue;
      await this.shadow.stop();
    }
    this.metrics.shadowActive.set({ flag: this.flag }, on ? 1 : 0);
    this.log.info(
      { flag: this.flag, shadow: on },
      on ? 'shadow comparisons started' : 'shadow comparisons stopped',
    );
  }

  /** A call the local implementation answered or refused (never throws, never waits). */
  observe(method: string, args: readonly unknown[], answer: unknown, refusal?: unknown): void {
    if (!this.running || !this.observed.has(method)) return;
    if (refusal !== undefined) {
      const code = refusalCode(refusal);
      if (code === undefined || !this.refusalsCompared.has(method)) return;
      answer = { refused: code };
    }
    if (this.queued >= MAX_QUEUED) {
      this.counts.skipped += 1;
      return;
    }
    if (this.shadow.capture) {
      try {
        answer = this.shadow.capture(method, args, answer);
      } catch (error) {
        this.log.warn({ err: error, flag: this.flag, method }, 'shadow: reading the local answer failed');
        return;
      }
    }
    this.queued += 1;
    this.queue = this.queue.then(async () => {
      this.queued -= 1;
      if (!this.running) return;
      await this.compareOne(method, args, answer);
    });
  }

  /** Resolves once every call observed so far was compared (tests, shutdown). */
  settled(): Promise<void> {
    return this.queue;
  }

  report(): ShadowReport {
    const { agree, disagree, error, skipped } = this.counts;
    const total = agree + disagree + error;
    return {
      flag: this.flag,
      running: this.running,
      agree,
      disagree,
      error,
      skipped,
      agreementRatio: total === 0 ? null : agree / total,
      mismatches: [...this.mismatches],
    };
  }

  async close(): Promise<void> {
    await this.set(false);
  }

  private async compareOne(method: string, args: readonly unknown[], answer: unknown): Promise<void> {
    let sample: ShadowSample | undefined;
    try {
      sample = await this.shadow.compare(method, args, answer);
    } catch (error) {
      this.count('error', { subject: `${method}`, outcome: 'error', error: (error as Error).message });
      return;
    }
    if (!sample) return;
    // Test only: the shared side answers differently, and every comparison must say so.
    const shared = planted('shadow-divergence') ? diverge(sample.shared) : sample.shared;
    if (canonical(sample.local) === canonical(shared)) this.count('agree');
    else
      this.count('disagree', { subject: sample.subject, outcome: 'disagree', local: sample.local, shared });
  }

  private count(outcome: ShadowOutcome, mismatch?: Omit<ShadowMismatch, 'at'>): void {
    this.counts[outcome] += 1;
    this.metrics.shadowComparisons.inc({ flag: this.flag, outcome });
    if (!mismatch) return;
    this.mismatches.push({ at: new Date().toISOString(), ...mismatch });
    if (this.mismatches.length > MAX_MISMATCHES) this.mismatches.shift();
  }
}
