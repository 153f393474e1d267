import type { Lifecycle } from './lifecycle.js';

/**
 * Whether this node may run the cluster's background work (schedule timers and polls, watch polling):
 * docs/design.md §2, row "background work on a warm standby". The reconciler runs the background rows'
 * local implementations only while the gate says yes, so the framework owns this contract; the gate row
 * (lease/) implements it.
 *
 * Contract: `isActive` answers now, from local knowledge only; `onChange` hears every change of answer.
 * The local gate always says yes (every node runs its background work: the warm-standby gap); the shared
 * one (flag `ha.active-lease`) says yes only on the node holding the cluster's active lease.
 */
export interface BackgroundGate extends Lifecycle {
  isActive(): boolean;
  onChange(listener: (active: boolean) => void): void;
}
