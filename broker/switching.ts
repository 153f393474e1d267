/**
 * Runtime switching between a state row's two implementations (DESIGN §3). The composition root builds
 * both and a `Switch`; consumers hold the switch's `view`, which forwards every call to whichever
 * implementation is in use at the time of the call. Only switches know both sides.
 */
import type { FlagKey } from '../flags/registry.js';

export type Implementation = 'local' | 'shared';

/**
 * What must happen before calls go to `to`: make `to` ready (subscribe before publishing), and finish
 * what `from` has in flight (drain before release). Calls made meanwhile still go to `from`.
 */
export type HandOver<T> = (from: T, to: T, target: Implementation) => Promise<void>;

export interface RowSwitch {
  readonly flag: FlagKey;
  readonly using: Implementation;
  /** False while this build has no shared implementation of the row: the flag cannot act yet. */
  readonly hasShared: boolean;
  select(target: Implementation): Promise<void>;
  /** Node shutdown: closes the implementation in use. */
  closeAll(): Promise<void>;
}

export class Switch<T extends object> implements RowSwitch {
  private active: T;
  using: Implementation = 'local';
  /** Forwards each call to the implementation in use when the call is made. */
  readonly view: T;

  constructor(
    readonly flag: FlagKey,
    private readonly local: T,
    private readonly shared: T | undefined,
    private readonly handOver: HandOver<T> = async () => {},
    /** Runs once calls go to the new implementation. */
    private readonly afterSwitch: () => Promise<void> = async () => {},
  ) {
    this.active = local;
    this.view = new Proxy(local, {
      get: (_target, property) => {
        const target = this.active;
        const value = Reflect.get(target, property, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  }

  get hasShared(): boolean {
    return this.shared !== undefined;
  }

  /**
   * Node shutdown: closes the implementation in use. The other one was handed over from (its work drained
   * and its timers stopped), and closing it could undo what the active one does (e.g. local presence
   * deleting rows that shared presence hands to the grace period).
   */
  async closeAll(): Promise<void> {
    const close = (this.active as { close?: () => Promise<void> }).close;
    if (typeof close === 'function') await close.call(this.active);
  }

  async select(target: Implementation): Promise<void> {
    if (target === this.using) return;
    const to = target === 'shared' ? this.shared : this.local;
    if (!to) return;
    await this.handOver(this.active, to, target);
    this.active = to;
    this.using = target;
    await this.afterSwitch();
  }
}
