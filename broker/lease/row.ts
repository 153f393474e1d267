/**
 * Row "background work on a warm standby" (flag `ha.active-lease`, docs/active-lease.md): whether this
 * node may run the local implementations' background work. The node's RowReconciler reads it.
 */
import { defineRow, type RowParts } from '../rows/row.js';
import { ActiveLease } from './active-lease.js';
import { AlwaysActive, type BackgroundGate } from './background-gate.js';

export const activeLeaseRow = defineRow({
  name: 'active-lease',
  flag: 'ha.active-lease',
  metric: 'mesh_broker_active_lease_held',
  doc: 'docs/active-lease.md',
  uses: ['config', 'pool', 'log', 'metrics'],
  build: ({ config, pool, log, metrics }): RowParts<BackgroundGate> => ({
    local: new AlwaysActive(),
    shared: new ActiveLease({ pool, nodeId: config.nodeId, ttlMs: config.activeLeaseTtlMs, log, metrics }),
  }),
});
