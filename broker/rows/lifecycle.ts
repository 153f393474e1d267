/**
 * The one lifecycle every implementation of a state row has (docs/design.md §3). A row's `Switch` is the
 * only caller of these three; nothing else starts or stops an implementation.
 *
 * - `activate(boot)`: the implementation is about to receive the row's calls (or, for background work,
 *   this node may now run it): subscribe to the bus, arm timers, pick up what the node holds. `boot` is
 *   true for the first activation of the row in this process only, so an implementation can recover what
 *   an earlier run of this node left behind without ever mistaking live state for leftovers.
 * - `deactivate()`: calls no longer come here: stop timers, detach from the bus, finish or give back what
 *   is in flight. It can be activated again later, any number of times (a flag flipped there and back).
 * - `close()`: node shutdown, after `deactivate`: release this node's share of cluster-wide state.
 *
 * Each must be safe to call when it has nothing to do.
 */
export interface Lifecycle {
  activate(boot: boolean): Promise<void>;
  deactivate(): Promise<void>;
  close(): Promise<void>;
}

/** Which of a row's two implementations is meant. */
export type Implementation = 'local' | 'shared';
