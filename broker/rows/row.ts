/**
 * A state row of the inventory (docs/design.md §2, docs/state-inventory.md) as one unit: its flag, its two
 * implementations and the hand-over between them, its metric family, its doc, what it does when a session
 * starts or ends, and the bus relays it keeps for the node's life. Each row folder has one `row.ts` that
 * defines it; `broker/modules.ts` lists them in order.
 */
import type { FlagKey } from '../../flags/registry.js';
import type { Bus, Unsubscribe } from '../bus/bus.js';
import type { BusRelay } from '../bus/messages.js';
import type { SessionIdentity } from '../connections/connection.js';
import type { Logger } from '../log.js';
import type { Lifecycle } from './lifecycle.js';
import { type HandOver, type RowSwitch, Switch } from './switch.js';

/** What a row does as sessions come and go on this node (each awaited in row order). */
export interface SessionHooks {
  /** A hello was accepted here (before the session's backlog is replayed). */
  started?(identity: SessionIdentity): Promise<void>;
  /** The session's socket here closed; it may come back (anywhere) within the grace period. */
  socketClosed?(identity: SessionIdentity): Promise<void>;
  /** The session left for good (presence's `peer.left`). */
  ended?(meshId: string, sessionId: string): Promise<void>;
}

/** What a row's `build` makes. */
export interface RowParts<T extends Lifecycle> {
  local: T;
  shared: T;
  /** State `to` takes over from `from` when the flag moves (after `from` stopped and `to` started). */
  handOver?: HandOver<T>;
  /** Session hooks, called on the row's view (so on whichever implementation is in use). */
  session?: (view: T) => SessionHooks;
  /**
   * Frames other nodes publish for this node's sockets, handled whichever implementation is in use, so
   * that a mixed cluster (some nodes flipped, some not) loses nothing that reaches a node.
   */
  relays?: BusRelay[];
}

/** What a row is, apart from how it is built. */
export interface RowInfo {
  flag: FlagKey;
  /** The row's metric family (a name registered in broker/metrics.ts). */
  metric: string;
  /** Where the row's mechanism is described. */
  doc: string;
  /**
   * Background work (timers that act on the cluster's behalf, not on a peer's request): while the local
   * implementation is in use, it runs only where the background gate (`ha.active-lease`) allows it.
   */
  background?: boolean;
}

export interface RowDefinition<T extends Lifecycle, Deps> extends RowInfo {
  build(deps: Deps): RowParts<T>;
}

/** A built row as the node manages it, whatever its interface. */
export interface ManagedRow {
  readonly definition: RowInfo;
  readonly switch: RowSwitch;
  readonly hooks: SessionHooks;
  /** Node shutdown: detaches the relays, then stops the implementation in use. */
  close(): Promise<void>;
}

export interface BuiltRow<T extends Lifecycle> extends ManagedRow {
  readonly switch: Switch<T>;
  readonly view: T;
}

export function defineRow<T extends Lifecycle, Deps>(
  definition: RowDefinition<T, Deps>,
): RowDefinition<T, Deps> {
  return definition;
}

/** Builds a row's implementations and its switch, and attaches its relays to the bus. */
export function buildRow<T extends Lifecycle, Deps>(
  definition: RowDefinition<T, Deps>,
  deps: Deps,
  infrastructure: { bus: Bus; log: Logger },
): BuiltRow<T> {
  const parts = definition.build(deps);
  const rowSwitch = new Switch<T>({
    flag: definition.flag,
    local: parts.local,
    shared: parts.shared,
    handOver: parts.handOver,
    log: infrastructure.log,
  });
  const detach: Unsubscribe[] = (parts.relays ?? []).map((relay) => infrastructure.bus.relay(relay));
  return {
    definition,
    switch: rowSwitch,
    view: rowSwitch.view,
    hooks: parts.session?.(rowSwitch.view) ?? {},
    close: async () => {
      for (const off of detach) off();
      await rowSwitch.close();
    },
  };
}
