/**
 * The verdict of a chaos run: one line per property, each judged from what the workloads recorded and
 * from the database, never from the brokers' own opinion. A property with nothing to judge fails, so a
 * run whose workloads never got going cannot pass.
 */
import { verifyMesh } from '../../broker/audit/verify.js';
import type { Pool } from '../../broker/db/pool.js';
import type { LoadReport } from '../load/report.js';
import type { ClockWorkload, ScheduleWorkload } from './workloads.js';

export interface Property {
  name: string;
  ok: boolean;
  /** The summary line (figures); with `problems`, the first few violations in full. */
  summary: string;
  problems: string[];
}

const MAX_PROBLEMS = 10;
const property = (name: string, problems: string[], summary: string): Property => ({
  name,
  ok: problems.length === 0,
  summary,
  problems: problems.slice(0, MAX_PROBLEMS),
});

/** Loss, duplicates and order, straight from the load checker's report. */
export function deliveryProperties(report: LoadReport): Property[] {
  const total =
    report.accepted.dm + report.accepted.broadcast + report.accepted.group + report.accepted.stream;
  const examples = (what: string) =>
    report.examples
      .filter((e) => e.what === what)
      .map(
        (e) =>
          `${e.what} ${e.kind} seq ${e.seq} from ${e.sender.slice(0, 12)}… to ${e.recipient.slice(0, 12)}…`,
      );
  const refused = Object.entries(report.refused)
    .map(([reason, n]) => `${n} ${reason}`)
    .join(', ');
  return [
    property(
      'no-loss',
      [
        ...(total === 0 ? ['no message was accepted'] : []),
        ...(report.lost > 0 ? [`${report.lost} deliveries lost`, ...examples('lost')] : []),
      ],
      `${report.delivered}/${report.expectedDeliveries} deliveries of ${total} accepted messages (${report.accepted.dm} dm, ${report.accepted.broadcast} broadcast, ${report.accepted.group} group), ${report.lost} lost` +
        `${refused ? `; not accepted: ${refused}` : ''}`,
    ),
    property(
      'no-duplicates',
      report.duplicates > 0 ? [`${report.duplicates} duplicates`, ...examples('duplicate')] : [],
      `${report.duplicates} duplicates after SDK dedup (${report.droppedBySdk} redeliveries dropped by the SDK)`,
    ),
    property(
      'sender-order',
      report.reordered > 0 ? [`${report.reordered} out of order`, ...examples('reordered')] : [],
      `${report.reordered} deliveries out of sender order`,
    ),
  ];
}

/** Every audit chain in the database (each mesh's, and the cluster chain of flag changes) walks clean. */
export async function auditProperty(pool: Pool): Promise<Property> {
  const meshes = await pool.query<{ meshId: string }>('SELECT DISTINCT mesh_id AS "meshId" FROM audit_log');
  const problems: string[] = [];
  let entries = 0;
  for (const { meshId } of meshes.rows) {
    const result = await verifyMesh(pool, meshId);
    entries += result.entries;
    if (result.valid) continue;
    if (result.brokenAt)
      problems.push(
        `mesh ${meshId}: broken at seq ${result.brokenAt.seq} (row ${result.brokenAt.id}): ${result.brokenAt.reason}`,
      );
    for (const fork of result.forks)
      problems.push(
        `mesh ${meshId}: fork on ${fork.kind} at seq ${fork.seq} (rows ${fork.rowIds.join(', ')})`,
      );
    if (!result.brokenAt && result.forks.length === 0) problems.push(`mesh ${meshId}: invalid`);
  }
  if (entries === 0) problems.push('no audit entry at all (is ha.audit on?)');
  return property('audit-chains', problems, `${meshes.rowCount} chains, ${entries} entries verified`);
}

/**
 * Every schedule the database has for the workload's mesh (confirmed or not) fired exactly once: one row in
 * schedule_occurrences, one stored message, one message id seen by the recipient.
 */
export async function scheduleProperty(pool: Pool, workload: ScheduleWorkload): Promise<Property> {
  const rows = await pool.query<{ id: string; occurrences: number; messages: number }>(
    `SELECT s.id,
            (SELECT count(*) FROM schedule_occurrences o WHERE o.schedule_id = s.id)::int AS occurrences,
            (SELECT count(*) FROM messages m WHERE m.schedule_id = s.id)::int AS messages
       FROM schedules s WHERE s.mesh_id = $1 ORDER BY s.created_at`,
    [workload.meshId],
  );
  const problems: string[] = [];
  for (const row of rows.rows) {
    const seen = workload.fired.get(row.id)?.size ?? 0;
    if (row.occurrences !== 1 || row.messages !== 1 || seen !== 1)
      problems.push(
        `schedule ${row.id}: ${row.occurrences} occurrence rows, ${row.messages} messages, ${seen} seen by the recipient (due ${dueOf(workload, row.id)})`,
      );
  }
  for (const id of workload.created.keys())
    if (!rows.rows.some((r) => r.id === id))
      problems.push(`schedule ${id}: confirmed but not in the database`);
  if (rows.rows.length === 0) problems.push('no schedule was created');
  return property(
    'schedules-once',
    problems,
    `${rows.rows.length} schedules (${workload.created.size} confirmed, ${workload.createFailures} creations refused or unanswered), ${rows.rows.length - problems.length} fired exactly once`,
  );
}

function dueOf(workload: ScheduleWorkload, id: string): string {
  const at = workload.created.get(id);
  return at === undefined ? 'unconfirmed' : new Date(at).toISOString();
}

/** Per observer, every tick larger than the one before it: never repeated, never back, across leaders. */
export function clockProperty(workload: ClockWorkload): Property {
  const problems: string[] = [];
  const counts: string[] = [];
  for (const [observer, ticks] of workload.ticks) {
    const epochs = new Set(ticks.map((t) => t.epoch));
    counts.push(`${observer} ${ticks.length} ticks/${epochs.size} epochs`);
    if (ticks.length === 0) problems.push(`${observer} saw no tick`);
    for (let i = 1; i < ticks.length; i++) {
      const [before, now] = [ticks[i - 1]!, ticks[i]!];
      // A repeat on the first tick after a move is the tick in flight (both nodes sent it), not a rewrite.
      if (now.tick <= before.tick && !now.moved)
        problems.push(
          `${observer}: tick ${before.tick} (epoch ${before.epoch}) then ${now.tick} (epoch ${now.epoch}), the ${i + 1}th tick it saw`,
        );
    }
  }
  return property('clock-increasing', problems, counts.join(', '));
}
