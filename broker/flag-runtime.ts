/**
 * The node's side of the flags: follows the provider's snapshots, hands each to the node's
 * RowReconciler (which moves the rows, one at a time, in order), and reports what the node acts on
 * (GET /flags, metrics, the heartbeat row). With the file provider it also records a value it sees
 * change (audited once cluster-wide, whichever node sees it first).
 */
import type { FlagProvider, FlagSnapshot, ProviderStatus } from '../flags/provider.js';
import { FLAGS, type FlagKey, type FlagMode, flagMode } from '../flags/registry.js';
import type { Logger } from './log.js';
import type { BrokerMetrics } from './metrics.js';
import type { RowReconciler } from './rows/reconciler.js';

/** After a push, the source is read again this long after (ms). */
const FOLLOW_UP_READS_MS = [500, 1500, 4000];

export interface FlagState {
  /** The provider's value. */
  value: boolean;
  /** What the node acts on: true when the row runs its shared implementation. */
  acting: boolean;
  /** The provider's value in full: `shadow` serves locally and compares (docs/flags.md § Shadow). */
  mode: FlagMode;
  row: string;
}

export interface FlagReport {
  environment: string;
  provider: 'file' | 'unleash';
  source: string;
  fetchedAt: string;
  error: string | null;
  /** How the provider's latest read went (`unauthorized`: Unleash refused the node's token). */
  status: ProviderStatus;
  flags: Record<FlagKey, FlagState>;
}

const PROVIDER_STATUSES: readonly ProviderStatus[] = ['ok', 'unauthorized', 'unreachable', 'error'];

function statusOf(snapshot: FlagSnapshot): ProviderStatus {
  return snapshot.status ?? (snapshot.error ? 'error' : 'ok');
}

export interface FlagRuntimeOptions {
  environment: string;
  provider: FlagProvider;
  reconciler: RowReconciler;
  metrics: BrokerMetrics;
  log: Logger;
  /** A provider value changed (after the switches moved): report it now, record it if needed. */
  onChange: (
    changed: Array<{ flag: FlagKey; value: boolean }>,
    snapshot: FlagSnapshot,
    initial: boolean,
  ) => void;
}

export class FlagRuntime {
  private applying: Promise<void> = Promise.resolve();
  private applied: FlagSnapshot | undefined;
  private followUps: NodeJS.Timeout[] = [];

  constructor(private readonly options: FlagRuntimeOptions) {}

  async start(): Promise<void> {
    this.options.provider.onSnapshot((snapshot) => {
      this.applying = this.applying.then(() => this.apply(snapshot));
    });
    await this.options.provider.start();
    this.applying = this.applying.then(() => this.apply(this.options.provider.current()));
    await this.applying;
  }

  /**
   * A push said the source changed: read it now, and again shortly after, because a server may take a
   * moment to serve what was just written (Unleash answers "unchanged" until its revision moves on).
   * Pushes arriving close together share the follow-up reads.
   */
  refresh(): void {
    this.readNow();
    for (const timer of this.followUps) clearTimeout(timer);
    this.followUps = FOLLOW_UP_READS_MS.map((delay) => {
      const timer = setTimeout(() => this.readNow(), delay);
      timer.unref();
      return timer;
    });
  }

  private readNow(): void {
    this.options.provider
      .refresh()
      .catch((error) => this.options.log.warn({ err: error }, 'flag refresh failed'));
  }

  /** Resolves once every snapshot received so far has been acted on. */
  settled(): Promise<void> {
    return this.applying;
  }

  report(): FlagReport {
    const snapshot = this.options.provider.current();
    const flags = Object.fromEntries(
      FLAGS.map((flag) => {
        const state: FlagState = {
          value: snapshot.values[flag.key],
          acting: this.options.reconciler.using(flag.key) === 'shared',
          mode: flagMode(snapshot.values, snapshot.shadow ?? [], flag.key),
          row: flag.row,
        };
        return [flag.key, state];
      }),
    ) as Record<FlagKey, FlagState>;
    return {
      environment: this.options.environment,
      provider: this.options.provider.kind,
      source: snapshot.source,
      fetchedAt: snapshot.fetchedAt.toISOString(),
      error: snapshot.error ?? null,
      status: statusOf(snapshot),
      flags,
    };
  }

  async close(): Promise<void> {
    for (const timer of this.followUps) clearTimeout(timer);
    await this.options.provider.close();
    await this.applying;
  }

  private async apply(snapshot: FlagSnapshot): Promise<void> {
    const { metrics, log } = this.options;
    metrics.flagConfigError.set(snapshot.error ? 1 : 0);
    for (const status of PROVIDER_STATUSES)
      metrics.flagProviderStatus.set({ status }, status === statusOf(snapshot) ? 1 : 0);
    if (snapshot.error)
      log.warn({ error: snapshot.error }, 'flags: source unusable, keeping the last good values');
    const changed = FLAGS.filter((flag) => this.applied?.values[flag.key] !== snapshot.values[flag.key]).map(
      (flag) => ({
        flag: flag.key,
        value: snapshot.values[flag.key],
      }),
    );
    await this.options.reconciler.apply(snapshot.values, snapshot.shadow ?? []);
    const initial = this.applied === undefined || this.applied.source !== snapshot.source;
    this.applied = snapshot;
    if (changed.length > 0) this.options.onChange(changed, snapshot, initial);
  }
}
