/**
 * Builds the rows of broker/modules.ts in their order, each from what it declared (broker/rows/row.ts):
 * its `build` gets the services it `uses` and the API of each row it `needs`, which must have been built
 * before it (an order mistake fails at start, naming both rows). The set then gives the node what it runs
 * of all rows together: their frames, their session hooks, what they end of a revoked member.
 */
import type { FrameRoutes } from '../../protocol/routes.js';
import type { Unsubscribe } from '../bus/bus.js';
import type { Member } from '../identity/directory.js';
import { ShadowRunner } from '../shadow/runner.js';
import type { NodeServices, ServiceName } from './context.js';
import type { Lifecycle } from './lifecycle.js';
import type { AnyRow, ApiOf, BuiltRow, ManagedRow, Needs, RowDefinition, SessionHooks } from './row.js';
import { Switch } from './switch.js';

/** Builds one row's implementations and its switch, and attaches its relays to the bus. */
export function buildRow<T extends Lifecycle, E extends object, K extends ServiceName, N extends Needs>(
  definition: RowDefinition<T, E, K, N>,
  services: NodeServices,
  built: ReadonlyMap<AnyRow, BuiltRow<Lifecycle>>,
): BuiltRow<T, E> {
  const deps: Record<string, unknown> = {};
  for (const name of definition.uses) deps[name] = services[name];
  for (const [name, needed] of Object.entries(definition.needs ?? {})) {
    const row = built.get(needed);
    if (!row) throw new Error(`row ${definition.name} needs ${needed.name}, which is not listed before it`);
    deps[name] = row.api;
  }
  const parts = definition.build(deps as Parameters<typeof definition.build>[0]);
  const rowSwitch = new Switch<T>({
    flag: definition.flag,
    local: parts.local,
    shared: parts.shared,
    handOver: parts.handOver,
    log: services.log,
  });
  const view = rowSwitch.view;
  parts.gauges?.(view);
  const detach: Unsubscribe[] = (parts.relays ?? []).map((relay) => services.bus.relay(relay));
  const shadow = parts.shadow
    ? new ShadowRunner(
        definition.flag,
        parts.shadow({ local: parts.local, shared: parts.shared }),
        services.metrics,
        services.log,
      )
    : undefined;
  return {
    definition,
    switch: rowSwitch,
    view,
    api: { ...(parts.exports as E), view },
    hooks: parts.session?.(view) ?? {},
    serveFrames: (routes) => parts.frames?.(routes, view),
    memberRevoked: async (member) => parts.memberRevoked?.(member),
    nodeWork: parts.nodeWork ?? [],
    setShadow: async (on) => {
      if (!shadow) return;
      // Observing only while comparing: a row out of shadow pays nothing per call.
      if (!on) rowSwitch.observeLocal(undefined);
      await shadow.set(on);
      if (on)
        rowSwitch.observeLocal((method, args, answer, refusal) =>
          shadow.observe(method, args, answer, refusal),
        );
    },
    shadowReport: () => shadow?.report(),
    close: async () => {
      rowSwitch.observeLocal(undefined);
      await shadow?.close();
      for (const off of detach) off();
      await rowSwitch.close();
    },
  };
}

export class RowSet {
  private readonly built = new Map<AnyRow, BuiltRow<Lifecycle>>();
  /** Every row in start order (the reconciler stops them in reverse). */
  readonly rows: ManagedRow[] = [];

  constructor(definitions: readonly AnyRow[], services: NodeServices) {
    for (const definition of definitions) {
      const row = buildRow(definition, services, this.built);
      this.built.set(definition, row);
      this.rows.push(row);
    }
  }

  /** A built row, for what the node itself needs of it (the gate, the peer side's views). */
  get<R extends AnyRow>(definition: R): BuiltRow<ApiOf<R>['view']> & { api: ApiOf<R> } {
    const row = this.built.get(definition);
    if (!row) throw new Error(`row ${definition.name} is not in the node's list`);
    return row as never;
  }

  /** Every row's request frames. */
  serveFrames(routes: FrameRoutes): void {
    for (const row of this.rows) row.serveFrames(routes);
  }

  /** Each row's session hooks, in row order. */
  get sessionHooks(): SessionHooks[] {
    return this.rows.map((row) => row.hooks);
  }

  /** Starts every row's work for the node's life (in row order). */
  startNodeWork(): void {
    for (const row of this.rows) for (const work of row.nodeWork) work.start();
  }

  /** Stops it again, in reverse order. */
  async stopNodeWork(): Promise<void> {
    for (const row of [...this.rows].reverse()) for (const work of row.nodeWork) await work.stop();
  }

  /** What every row ends of a revoked member, in row order. */
  async memberRevoked(member: Member): Promise<void> {
    for (const row of this.rows) await row.memberRevoked(member);
  }
}
