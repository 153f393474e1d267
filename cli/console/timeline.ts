/**
 * The console's timeline: what changed the environment, newest first, read from where it is already
 * recorded (no table of its own):
 *
 * - flag changes and promotions: the cluster audit chain (`audit_log`, mesh CLUSTER_CHAIN_ID), events
 *   `flag.changed` (written by recordFlagChange, whoever changed the flag: CLI, console, promotion, or a
 *   node that noticed a hand edit) and `promotion.<status>` (cli/promotion/promote.ts; their payload
 *   carries the reason, which the `promotions` table does not); not the analysis's measurements (a bake
 *   is dozens: they would push everything else out; the promotion panel shows them, activity.ts);
 * - smoke runs: `smoke_runs` (every run `workbench promote` made, with its per-check results).
 *
 * Bounded: the newest TIMELINE_LIMIT entries of the environment; the per-check results are counted in
 * SQL, never shipped whole.
 */
import type { Pool } from '../../broker/db/pool.js';
import { CLUSTER_CHAIN_ID } from '../../flags/changes.js';

export const TIMELINE_LIMIT = 50;

export interface TimelineEntry {
  /** Unique across both sources: `audit:<id>` or `smoke:<id>`. */
  id: string;
  /** ISO time of the record. */
  at: string;
  kind: 'flag' | 'promotion' | 'smoke';
  /** The actor recorded (`console:<user>`, an operator, `node:<id>`); null for smoke runs (their promotion's). */
  who: string | null;
  what: string;
  outcome: string;
  /** False when it means trouble: a blocked or rolled-back promotion, a failed smoke run. */
  ok: boolean;
}

export interface TimelineRow {
  source: 'audit' | 'smoke';
  id: string;
  at: Date;
  eventType: string;
  actor: string | null;
  payload: Record<string, unknown>;
}

const onOff = (value: unknown) => (value === true ? 'on' : value === false ? 'off' : String(value));

/** A record as the page shows it: who, what, and how it ended. */
export function toTimelineEntry(row: TimelineRow): TimelineEntry {
  const base = { id: `${row.source}:${row.id}`, at: row.at.toISOString(), who: row.actor };
  const p = row.payload;
  if (row.source === 'smoke') {
    const tally = `${p.met}/${p.checks} checks met`;
    return {
      ...base,
      kind: 'smoke',
      what: `phase ${p.phase} smoke checks`,
      outcome: p.passed
        ? `passed: ${tally}`
        : `failed: ${tally}${p.firstFailed ? `, first: ${p.firstFailed}` : ''}`,
      ok: p.passed === true,
    };
  }
  if (row.eventType === 'flag.changed')
    return {
      ...base,
      kind: 'flag',
      what: `${p.flag} ${onOff(p.from)} → ${onOff(p.to)}`,
      outcome: 'changed, audited',
      ok: true,
    };
  const status = row.eventType.slice('promotion.'.length);
  const why = [p.reason, p.failedCheck ? `check ${p.failedCheck}` : undefined].filter(Boolean).join('; ');
  return {
    ...base,
    kind: 'promotion',
    what: `${status === 'rollback' ? 'rollback' : 'promotion'} phase ${p.from} → ${p.to}`,
    outcome: why ? `${status}: ${why}` : status,
    ok: status === 'promoted' || status === 'rollback',
  };
}

/** The newest `limit` entries of `environment`, newest first. */
export async function readTimeline(
  pool: Pool,
  environment: string,
  limit = TIMELINE_LIMIT,
): Promise<TimelineEntry[]> {
  const result = await pool.query<TimelineRow>(
    `SELECT source, id::text AS id, at, event_type AS "eventType", actor, payload FROM (
       SELECT 'audit' AS source, id, created_at AS at, event_type, actor, payload
         FROM audit_log
        WHERE mesh_id = $1 AND (event_type = 'flag.changed' OR event_type LIKE 'promotion.%')
          AND event_type <> 'promotion.analysis.measurement'
          AND payload->>'environment' = $2
       UNION ALL
       SELECT 'smoke', id, created_at, 'smoke.run', NULL,
              jsonb_build_object(
                'phase', phase,
                'passed', passed,
                'checks', jsonb_array_length(results),
                'met', (SELECT count(*) FROM jsonb_array_elements(results) AS r(c) WHERE (c->>'met')::boolean),
                'firstFailed', (SELECT c->>'name' FROM jsonb_array_elements(results) WITH ORDINALITY AS r(c, n)
                                 WHERE NOT (c->>'met')::boolean ORDER BY n LIMIT 1))
         FROM smoke_runs
        WHERE environment = $2
     ) AS entries
     ORDER BY at DESC, source DESC, id DESC
     LIMIT $3`,
    [CLUSTER_CHAIN_ID, environment, limit],
  );
  return result.rows.map(toTimelineEntry);
}
