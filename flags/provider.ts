/**
 * Where a node's flag values come from. The provider is configuration (FLAGS_PROVIDER), not code: the
 * broker only sees snapshots.
 *
 * Contract:
 * - `current()` is always complete: a node never runs without a value for every flag (defaults, then
 *   the environment's file as bootstrap, then the provider's own data).
 * - A provider that cannot read its source keeps its last good values and reports the error.
 * - `refresh()` re-reads the source now (the push path); the provider also polls on its own.
 * - Listeners hear every new snapshot, changed or not (so `fetchedAt` and errors stay current).
 */
import type { FlagKey, FlagValues } from './registry.js';

export type FlagSource = 'default' | 'file' | 'bootstrap' | 'backup' | 'unleash';

/**
 * How the latest read went: `unauthorized` is Unleash refusing the node's token (401/403),
 * `unreachable` no answer at all, `error` an unusable answer or file.
 */
export type ProviderStatus = 'ok' | 'unauthorized' | 'unreachable' | 'error';

export interface FlagSnapshot {
  values: FlagValues;
  /** The flags in shadow (their value false): absent is none (docs/flags.md § Shadow). */
  shadow?: readonly FlagKey[];
  source: FlagSource;
  fetchedAt: Date;
  /** Why the latest read failed, while the values stay those of the last good read. */
  error: string | undefined;
  /** Set by providers that tell failures apart (Unleash); otherwise `error` decides ok or error. */
  status?: ProviderStatus;
}

export interface FlagProvider {
  readonly kind: 'file' | 'unleash';
  start(): Promise<void>;
  current(): FlagSnapshot;
  refresh(): Promise<void>;
  onSnapshot(listener: (snapshot: FlagSnapshot) => void): void;
  close(): Promise<void>;
}
