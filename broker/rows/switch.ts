/**
 * Runtime switching between a state row's two implementations (docs/design.md §3). Consumers hold the
 * switch's `view`, which forwards every call to the implementation in use at the time of the call. Only
 * the switch knows both sides, and only the node's `RowReconciler` moves it.
 *
 * A move is safe by construction:
 * 1. from the moment a move begins, new calls wait for it to end and then go to whichever implementation
 *    the row uses by then (never to one that is being taken down);
 * 2. calls already running on the old implementation are waited for (bounded: a call that does not end
 *    within `drainMs` is left behind, logged);
 * 3. the old implementation is deactivated, the new one activated, then the row's hand-over runs (state
 *    the new one takes over from the old one);
 * 4. if any of that fails, what was done is undone (the new one deactivated, the old one activated again)
 *    and the row stays as it was; the error reaches the caller.
 */
import type { FlagKey } from '../../flags/registry.js';
import type { Logger } from '../log.js';
import type { Implementation, Lifecycle } from './lifecycle.js';

/** State the new implementation takes over from the old one; runs after both changed state. */
export type HandOver<T> = (from: T, to: T, target: Implementation) => Promise<void>;

/**
 * Hears each call the local implementation answered, with its answer, or with the error it refused the
 * call with (shadow mode: broker/shadow/; the runner decides which refusals it compares).
 */
export type CallObserver = (
  method: string,
  args: readonly unknown[],
  answer: unknown,
  refusal?: unknown,
) => void;

/** How long a move waits for calls running on the old implementation. */
const DRAIN_MS = 5000;

export interface SwitchOptions<T> {
  flag: FlagKey;
  local: T;
  shared: T;
  handOver?: HandOver<T>;
  log: Logger;
  drainMs?: number;
}

/** A switch as the reconciler moves it, whatever the row's interface. */
export interface RowSwitch {
  readonly flag: FlagKey;
  readonly using: Implementation;
  readonly running: boolean;
  select(target: Implementation, run?: boolean): Promise<void>;
  close(): Promise<void>;
}

export class Switch<T extends Lifecycle> implements RowSwitch {
  readonly flag: FlagKey;
  /** Forwards each call to the implementation in use when the call is made. */
  readonly view: T;
  private selected: Implementation = 'local';
  private activated = false;
  private everActivated = false;
  /** Set while a move runs: calls made meanwhile wait for it. */
  private moving: Promise<void> | undefined;
  private inFlight = 0;
  private idle: (() => void) | undefined;
  private readonly wrappers = new Map<PropertyKey, unknown>();
  private observer: CallObserver | undefined;

  constructor(private readonly options: SwitchOptions<T>) {
    this.flag = options.flag;
    this.view = new Proxy(options.local, { get: (_target, property) => this.forward(property) });
  }

  /** The implementation that receives the row's calls. */
  get using(): Implementation {
    return this.selected;
  }

  /** Whether the implementation in use is activated (false for background work on a standby). */
  get running(): boolean {
    return this.activated;
  }

  /** The implementation behind a side (for the few readers that need its own methods, e.g. metrics). */
  implementation(side: Implementation): T {
    return side === 'shared' ? this.options.shared : this.options.local;
  }

  /**
   * Shadow mode: `observer` hears every call answered by the local implementation while it is in use
   * (after the answer, off the caller's path); undefined stops it. The caller gets the same answer either way.
   */
  observeLocal(observer: CallObserver | undefined): void {
    this.observer = observer;
  }

  /**
   * Makes `target` the implementation in use, activated when `run` (a row whose work is not gated is
   * always run). Nothing to do when it already is. Throws when the move failed and was undone.
   */
  async select(target: Implementation, run = true): Promise<void> {
    if (target === this.selected && run === this.activated) return;
    const moved = this.move(target, run);
    this.moving = moved.finally(() => {
      this.moving = undefined;
    });
    await this.moving;
  }

  /**
   * Node shutdown: the implementation in use stops and releases its share. Calls made meanwhile wait for
   * it; calls after it go to the stopped implementation (late work of a stopping node), never wait again.
   */
  async close(): Promise<void> {
    await this.moving?.catch(() => {});
    const closing = (async () => {
      await this.drained();
      const current = this.implementation(this.selected);
      if (this.activated) await current.deactivate();
      this.activated = false;
      await current.close();
    })();
    this.moving = closing.finally(() => {
      this.moving = undefined;
    });
    await this.moving;
  }

  private async move(target: Implementation, run: boolean): Promise<void> {
    const from = this.implementation(this.selected);
    const to = this.implementation(target);
    const wasActive = this.activated;
    await this.drained();
    if (from === to) {
      if (run) await to.activate(this.takeBoot());
      else await to.deactivate();
      this.activated = run;
      return;
    }
    let fromDown = false;
    let toUp = false;
    try {
      if (wasActive) await from.deactivate();
      fromDown = true;
      if (run) await to.activate(this.takeBoot());
      toUp = run;
      await this.options.handOver?.(from, to, target);
    } catch (error) {
      // Undo, so that the row is exactly as it was: the old implementation in use and running as before.
      if (toUp) await to.deactivate().catch((e) => this.logUndo(e));
      if (fromDown && wasActive) await from.activate(false).catch((e) => this.logUndo(e));
      throw error;
    }
    this.selected = target;
    this.activated = run;
  }

  private takeBoot(): boolean {
    const boot = !this.everActivated;
    this.everActivated = true;
    return boot;
  }

  private logUndo(error: unknown): void {
    this.options.log.error({ err: error, flag: this.flag }, 'undoing a failed row switch failed');
  }

  /** Resolves when no call runs on the current implementation (or after the drain bound). */
  private drained(): Promise<void> {
    if (this.inFlight === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.options.log.warn(
          { flag: this.flag, inFlight: this.inFlight },
          'row switch: calls still running on the old implementation; moving on',
        );
        this.idle = undefined;
        resolve();
      }, this.options.drainMs ?? DRAIN_MS);
      this.idle = () => {
        clearTimeout(timer);
        this.idle = undefined;
        resolve();
      };
    });
  }

  private forward(property: PropertyKey): unknown {
    const value = Reflect.get(this.implementation(this.selected), property);
    if (typeof value !== 'function') return value;
    let wrapper = this.wrappers.get(property);
    if (!wrapper) {
      wrapper = (...args: unknown[]) => this.call(property, args);
      this.wrappers.set(property, wrapper);
    }
    return wrapper;
  }

  /** Hands a local answer (or its refusal) to the observer once it is there. */
  private observed(observer: CallObserver, method: string, args: unknown[], result: unknown): void {
    if (!(result instanceof Promise)) {
      observer(method, args, result);
      return;
    }
    result.then(
      (answer) => observer(method, args, answer),
      (error: unknown) => observer(method, args, undefined, error ?? new Error('refused')),
    );
  }

  private call(property: PropertyKey, args: unknown[]): unknown {
    if (this.moving) {
      const deferred = this.moving.catch(() => {}).then(() => this.call(property, args));
      // A caller of a method that returns nothing does not look at the promise: never leave it unhandled.
      deferred.catch(() => {});
      return deferred;
    }
    const target = this.implementation(this.selected);
    const result = (Reflect.get(target, property) as (...a: unknown[]) => unknown).apply(target, args);
    const observer = this.selected === 'local' ? this.observer : undefined;
    if (observer) this.observed(observer, String(property), args, result);
    if (result instanceof Promise) {
      this.inFlight++;
      result
        .finally(() => {
          this.inFlight--;
          if (this.inFlight === 0) this.idle?.();
        })
        .catch(() => {});
    }
    return result;
  }
}
