/** Row "audit lastHash" (flag `ha.audit`, docs/audit.md): one hash chain per mesh. */
import { regionsRow } from '../regions/row.js';
import { defineRow, type RowParts } from '../rows/row.js';
import type { AuditLog } from './audit.js';
import { LocalAuditLog } from './audit.local.js';
import { SharedAuditLog } from './audit.shared.js';
import { registerAuditFrames } from './frames.js';

export const auditRow = defineRow({
  name: 'audit',
  flag: 'ha.audit',
  metric: 'mesh_broker_audit_appends_total',
  doc: 'docs/audit.md',
  uses: ['pool', 'log', 'metrics'],
  // `audit.query` reads where the regions row says lists read.
  needs: { regions: regionsRow },
  build: ({ pool, log, metrics, regions }): RowParts<AuditLog> => {
    const counters = (mode: 'local' | 'shared') => ({
      appended: (count: number) => metrics.auditAppends.inc({ mode }, count),
      failed: (count: number) => metrics.auditAppendFailures.inc(count),
    });
    return {
      local: new LocalAuditLog(pool, log, counters('local')),
      shared: new SharedAuditLog(pool, log, counters('shared')),
      frames: (routes, audit) => registerAuditFrames(routes, pool, audit, regions.view),
    };
  },
});
