/**
 * A state row of the inventory (docs/design.md §2, docs/state-inventory.md) as one plugin, in the shape of
 * a Fastify plugin: its folder's `row.ts` defines it with `defineRow`, declaring what it depends on (the
 * node services it `uses`, the rows it `needs`, by their definitions) and contributing, from its folder,
 * everything the node runs of it: its two implementations and the hand-over between them, its stores, its
 * request frames, what it ends of a revoked member, its gauges, its session hooks and its bus relays.
 * Encapsulated: `build` receives exactly what was declared. `broker/modules.ts` lists the rows in order
 * and broker/rows/row-set.ts builds them; the root knows no row's parts.
 */

import type { FlagKey } from '../../flags/registry.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { BusRelay } from '../bus/messages.js';
import type { SessionIdentity } from '../connections/connection.js';
import type { Member } from '../identity/directory.js';
import type { ShadowReport } from '../shadow/runner.js';
import type { RowShadow } from '../shadow/shadow.js';
import type { NodeServices, ServiceName } from './context.js';
import type { Lifecycle } from './lifecycle.js';
import type { HandOver, RowSwitch, Switch } from './switch.js';

/** What a row does as sessions come and go on this node (each awaited in row order). */
export interface SessionHooks {
  /** A hello was accepted here (before the session's backlog is replayed). */
  started?(identity: SessionIdentity): Promise<void>;
  /** The session's socket here closed; it may come back (anywhere) within the grace period. */
  socketClosed?(identity: SessionIdentity): Promise<void>;
  /** The session left for good (presence's `peer.left`). */
  ended?(meshId: string, sessionId: string): Promise<void>;
}

/** What a row's `build` makes. `E` is what the row offers the rows that need it, beside its view. */
export interface RowParts<T extends Lifecycle, E extends object = object> {
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
  /** The row's request frames (docs/protocol.md), served on its view. */
  frames?: (routes: FrameRoutes, view: T) => void;
  /**
   * What the row ends of a member the admin API just revoked (its schedules, its watches), before the
   * member's sessions are closed; in Postgres, so for every node.
   */
  memberRevoked?: (member: Member) => Promise<void>;
  /** Gauges read from the view (registered once the view exists). */
  gauges?: (view: T) => void;
  /**
   * Work the row runs for the node's life whichever implementation is in use (delivery's retention),
   * started once the rows were first moved and stopped before they close (broker/app.ts).
   */
  nodeWork?: NodeWork[];
  /** What rows that need this one get beside its view (a store, say). */
  exports?: E;
  /**
   * The row's comparator for shadow mode (its `shadow.ts`, broker/shadow/shadow.ts): what the shared
   * implementation would answer to the calls the local one serves. A row without one runs `shadow` as off.
   */
  shadow?: (sides: { local: T; shared: T }) => RowShadow;
}

/** A row's work for the node's life (see RowParts.nodeWork). */
export interface NodeWork {
  start(): void;
  stop(): Promise<void>;
}

/** What a row is, apart from how it is built. */
export interface RowInfo {
  /** How other rows and errors name it. */
  name: string;
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

/** What a row that needs another gets of it: the other's view (its switch) and its exports. */
export type RowApi<T, E> = { readonly view: T } & E;

/** Any row definition, whatever its interface and dependencies (what lists and lookups hold). */
export interface AnyRow extends RowInfo {
  uses: readonly ServiceName[];
  needs?: Needs;
  // biome-ignore lint/suspicious/noExplicitAny: a row may have any interface and exports
  build(deps: never): RowParts<any, any>;
}
/** The rows a row needs, by the name its `build` receives each under. */
export type Needs = Record<string, AnyRow>;
/** What a row that needs `R` gets of it. */
export type ApiOf<R> = R extends { build(deps: never): RowParts<infer T, infer E> } ? RowApi<T, E> : never;

/** What `build` receives: the declared services and the declared rows, nothing else. */
export type DepsOf<K extends ServiceName, N extends Needs> = Pick<NodeServices, K> & {
  [P in keyof N]: ApiOf<N[P]>;
};

export interface RowDefinition<T extends Lifecycle, E extends object, K extends ServiceName, N extends Needs>
  extends RowInfo {
  /** The node services `build` uses. */
  uses: readonly K[];
  /** The rows `build` uses, each listed before this one in broker/modules.ts. */
  needs?: N;
  build(deps: DepsOf<K, N>): RowParts<T, E>;
}

/**
 * Defines a row. `T` (its interface) and `E` (its exports) come from the return type `build` is annotated
 * with (`RowParts<Scheduler, { store: ScheduleStore }>`); the services and rows from `uses` and `needs`.
 */
export function defineRow<
  T extends Lifecycle,
  E extends object,
  K extends ServiceName,
  N extends Needs = Record<never, never>,
>(definition: RowDefinition<T, E, K, N>): RowDefinition<T, E, K, N> {
  return definition;
}

/** A built row as the node manages it, whatever its interface. */
export interface ManagedRow {
  readonly definition: RowInfo;
  readonly switch: RowSwitch;
  readonly hooks: SessionHooks;
  /** Registers the row's request frames. */
  serveFrames(routes: FrameRoutes): void;
  memberRevoked(member: Member): Promise<void>;
  readonly nodeWork: readonly NodeWork[];
  /**
   * Starts (true) or stops the row's shadow comparisons; a row without a comparator ignores it. The
   * reconciler asks for true only while the flag is `shadow` and the local implementation serves.
   */
  setShadow(on: boolean): Promise<void>;
  /** The row's shadow comparisons so far; undefined for a row without a comparator. */
  shadowReport(): ShadowReport | undefined;
  /** Node shutdown: detaches the relays, then stops the implementation in use. */
  close(): Promise<void>;
}

export interface BuiltRow<T extends Lifecycle, E extends object = object> extends ManagedRow {
  readonly switch: Switch<T>;
  readonly view: T;
  readonly api: RowApi<T, E>;
}
