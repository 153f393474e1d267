/** Row "audit lastHash" (flag `ha.audit`, docs/audit.md): one hash chain per mesh. */
import type { RowContext } from '../rows/context.js';
import { defineRow } from '../rows/row.js';
import type { AuditLog } from './audit.js';
import { LocalAuditLog } from './audit.local.js';
import { SharedAuditLog } from './audit.shared.js';

export const auditRow = defineRow<AuditLog, RowContext>({
  flag: 'ha.audit',
  metric: 'mesh_broker_audit_appends_total',
  doc: 'docs/audit.md',
  build: ({ pool, log, metrics }) => {
    const counters = (mode: 'local' | 'shared') => ({
      appended: (count: number) => metrics.auditAppends.inc({ mode }, count),
      failed: (count: number) => metrics.auditAppendFailures.inc(count),
    });
    return {
      local: new LocalAuditLog(pool, log, counters('local')),
      shared: new SharedAuditLog(pool, log, counters('shared')),
    };
  },
});
