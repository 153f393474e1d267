/**
 * The one owner of what runs where on this node (docs/active-lease.md): it moves every state row to the
 * implementation its flag selects, and decides whether each background row runs. Passes are serialized
 * (one at a time, in row order), so a flag flip racing a change of the active lease is simply two passes.
 *
 * The model: a row's background work (schedule timers, watch polling) runs
 * - on every node while the row's shared implementation is in use: those implementations claim each
 *   item (an occurrence, a watch) in Postgres, so every node may take part;
 * - only where the background gate allows it while the local implementation is in use: with
 *   `ha.active-lease` on, on the node holding the cluster's active lease (phase 1 and 2's warm standby);
 *   with it off, on every node (the single-node broker's behaviour, gap included).
 * The gate is itself a row (flag `ha.active-lease`) and comes before the background rows.
 */
import { EventEmitter } from 'node:events';
import type { FlagKey, FlagValues } from '../../flags/registry.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import { plantFlagActing } from '../plants.js';
import type { BackgroundGate } from './background-gate.js';
import type { Implementation } from './lifecycle.js';
import type { BuiltRow, ManagedRow } from './row.js';

/** What a node tells about itself; tests and tools wait on these instead of polling. */
export interface NodeEvents {
  'row.switched': [{ flag: FlagKey; using: Implementation; running: boolean }];
  'row.switch-failed': [{ flag: FlagKey; target: Implementation; error: unknown }];
  /** Whether the gate lets this node run local background work changed. */
  'background.changed': [{ allowed: boolean }];
  /** A pass over every row ended (after a flag snapshot or a change of the gate). */
  reconciled: [];
}

/** After a failed move, the next pass comes this soon. */
const RETRY_MS = 1000;

export interface ReconcilerOptions {
  /** Every row, in start order (the gate before the background rows). */
  rows: ManagedRow[];
  gate: BuiltRow<BackgroundGate>;
  log: Logger;
  metrics: BrokerMetrics;
}

export class RowReconciler extends EventEmitter<NodeEvents> {
  private values: FlagValues | undefined;
  private shadow: readonly FlagKey[] = [];
  private passes: Promise<void> = Promise.resolve();
  private allowed: boolean | undefined;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;

  constructor(private readonly options: ReconcilerOptions) {
    super();
    // Either side of the gate may change its answer (the lease gained or lost): run a pass.
    for (const side of ['local', 'shared'] as const) {
      options.gate.switch.implementation(side).onChange(() => void this.pass());
    }
  }

  /**
   * Moves every row to what `values` select, and runs the shadow comparisons of the flags in `shadow`
   * (docs/flags.md § Shadow); resolves when that pass is done.
   */
  apply(values: FlagValues, shadow: readonly FlagKey[] = []): Promise<void> {
    this.values = values;
    this.shadow = shadow;
    return this.pass();
  }

  /** Every row's shadow comparisons (rows with a comparator), for the admin API. */
  shadowReports() {
    return this.options.rows.flatMap((row) => row.shadowReport() ?? []);
  }

  /** What each flag's row uses now (for /flags, metrics and the heartbeat). */
  using(flag: FlagKey): Implementation | undefined {
    return this.options.rows.find((row) => row.definition.flag === flag)?.switch.using;
  }

  /** Whether local background work may run here (true unless this node is a standby). */
  backgroundAllowed(): boolean {
    const gate = this.options.gate.switch;
    return gate.implementation(gate.using).isActive();
  }

  /** Whether this node holds the active lease: undefined while `ha.active-lease` is off. */
  holdsActiveLease(): boolean | undefined {
    const gate = this.options.gate.switch;
    return gate.using === 'shared' ? gate.implementation('shared').isActive() : undefined;
  }

  /** Node shutdown: after the pass in progress, every row stops, in reverse start order. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    await this.passes;
    for (const row of [...this.options.rows].reverse()) {
      await row
        .close()
        .catch((error) =>
          this.options.log.warn({ err: error, flag: row.definition.flag }, 'closing a row failed'),
        );
    }
  }

  /** A comparator that cannot start (its copy's Redis down) leaves the row serving as it is, and is logged. */
  private async shadowRow(row: ManagedRow, on: boolean): Promise<void> {
    await row.setShadow(on).catch((error) => {
      this.options.log.warn(
        { err: error, flag: row.definition.flag, shadow: on },
        'shadow comparisons: could not change',
      );
    });
  }

  private pass(): Promise<void> {
    this.passes = this.passes.then(() => this.reconcile());
    return this.passes;
  }

  private async reconcile(): Promise<void> {
    const { values } = this;
    if (!values || this.closed) return;
    const { log, metrics } = this.options;
    let failed = false;
    for (const row of this.options.rows) {
      const { flag, background } = row.definition;
      const target: Implementation = values[flag] ? 'shared' : 'local';
      const run = !background || target === 'shared' || this.backgroundAllowed();
      const before = { using: row.switch.using, running: row.switch.running };
      try {
        await row.switch.select(target, run);
      } catch (error) {
        metrics.rowSwitches.inc({ flag, outcome: 'failed' });
        log.error({ err: error, flag, target }, 'row switch failed and was undone; the row stays as it was');
        this.emit('row.switch-failed', { flag, target, error });
        failed = true;
        continue;
      }
      if (before.using !== row.switch.using || before.running !== row.switch.running) {
        if (before.using !== row.switch.using) metrics.rowSwitches.inc({ flag, outcome: 'done' });
        log.info({ flag, using: row.switch.using, running: row.switch.running }, 'row switched');
        this.emit('row.switched', { flag, using: row.switch.using, running: row.switch.running });
      }
      metrics.flagEnabled.set({ flag }, row.switch.using === 'shared' ? 1 : 0);
      await this.shadowRow(row, !values[flag] && this.shadow.includes(flag) && row.switch.using === 'local');
      plantFlagActing(flag, row.switch.using === 'shared');
    }
    const allowed = this.backgroundAllowed();
    metrics.activeLease.set(this.holdsActiveLease() ? 1 : 0);
    if (allowed !== this.allowed) {
      if (this.allowed !== undefined)
        log.info(
          { backgroundWork: allowed },
          allowed ? 'running background work' : 'background work stopped (standby)',
        );
      this.allowed = allowed;
      this.emit('background.changed', { allowed });
    }
    // A failed move (the database unreachable, say) is tried again until the node gets where it should be.
    clearTimeout(this.retry);
    if (failed) {
      this.retry = setTimeout(() => void this.pass(), RETRY_MS);
      this.retry.unref();
    }
    this.emit('reconciled');
  }
}
