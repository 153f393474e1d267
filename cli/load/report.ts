/**
 * What `workbench load` prints: one summary line (or `--json`), and whether the run passed. A run passes
 * only if something was accepted and nothing accepted was lost, duplicated or reordered, so an empty run
 * can never pass by default.
 */
import type { CheckerResult, Kind } from './checker.js';

export interface Percentiles {
  count: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** Nearest-rank percentiles (ms, rounded to 0.1). */
export function percentiles(values: number[]): Percentiles {
  if (values.length === 0) return { count: 0, p50: 0, p90: 0, p99: 0, max: 0 };
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
  const round = (v: number) => Math.round(v * 10) / 10;
  return {
    count: sorted.length,
    p50: round(at(0.5)),
    p90: round(at(0.9)),
    p99: round(at(0.99)),
    max: round(sorted[sorted.length - 1]!),
  };
}

export interface RunFacts {
  peers: number;
  meshes: number;
  nodes: string[];
  durationMs: number;
  /** Requests the broker refused (rate_limited, …) or that got no reply, by reason. */
  refused: Record<string, number>;
  /** Repeats the SDK dropped by messageId before our listeners (redeliveries, not errors). */
  droppedBySdk: number;
  drainMs: number;
}

export interface LoadReport {
  ok: boolean;
  /** Why the run failed, empty when it passed. */
  failures: string[];
  peers: number;
  meshes: number;
  nodes: string[];
  durationMs: number;
  accepted: Record<Kind, number>;
  acceptedPerSecond: number;
  expectedDeliveries: number;
  delivered: number;
  lost: number;
  duplicates: number;
  reordered: number;
  unconfirmed: number;
  refused: Record<string, number>;
  droppedBySdk: number;
  drainMs: number;
  latencyMs: Record<Kind | 'all', Percentiles>;
  examples: CheckerResult['examples'];
}

export function buildReport(check: CheckerResult, facts: RunFacts): LoadReport {
  const total = check.accepted.dm + check.accepted.broadcast + check.accepted.group + check.accepted.stream;
  const failures: string[] = [];
  if (total === 0) failures.push('no message was accepted');
  if (check.lost > 0) failures.push(`${check.lost} deliveries lost`);
  if (check.duplicates > 0) failures.push(`${check.duplicates} duplicates after SDK dedup`);
  if (check.reordered > 0) failures.push(`${check.reordered} deliveries out of sender order`);
  const all = [
    ...check.latencies.dm,
    ...check.latencies.broadcast,
    ...check.latencies.group,
    ...check.latencies.stream,
  ];
  return {
    ok: failures.length === 0,
    failures,
    peers: facts.peers,
    meshes: facts.meshes,
    nodes: facts.nodes,
    durationMs: Math.round(facts.durationMs),
    accepted: check.accepted,
    acceptedPerSecond: Math.round((total / Math.max(facts.durationMs, 1)) * 1000),
    expectedDeliveries: check.expectedDeliveries,
    delivered: check.delivered,
    lost: check.lost,
    duplicates: check.duplicates,
    reordered: check.reordered,
    unconfirmed: check.unconfirmed,
    refused: facts.refused,
    droppedBySdk: facts.droppedBySdk,
    drainMs: Math.round(facts.drainMs),
    latencyMs: {
      dm: percentiles(check.latencies.dm),
      broadcast: percentiles(check.latencies.broadcast),
      group: percentiles(check.latencies.group),
      stream: percentiles(check.latencies.stream),
      all: percentiles(all),
    },
    examples: check.examples,
  };
}

/** The one-line summary, e.g. `load ok: 20 peers/2 meshes, accepted 300 dm …, 0 lost, 0 duplicates, …`. */
export function summaryLine(report: LoadReport): string {
  const { accepted, latencyMs: l } = report;
  const refused = Object.entries(report.refused)
    .map(([reason, n]) => `${n} ${reason}`)
    .join(', ');
  return (
    `load ${report.ok ? 'ok' : 'FAILED'}: ${report.peers} peers/${report.meshes} meshes on ${report.nodes.length} url(s), ` +
    `${(report.durationMs / 1000).toFixed(1)} s; accepted ${accepted.dm} dm, ${accepted.broadcast} broadcast, ` +
    `${accepted.group ? `${accepted.group} group, ` : ''}` +
    `${accepted.stream} stream (${report.acceptedPerSecond}/s); delivered ${report.delivered}/${report.expectedDeliveries}, ` +
    `${report.lost} lost, ${report.duplicates} duplicates, ${report.reordered} reordered` +
    `${refused ? `; refused: ${refused}` : ''}; latency ms p50 ${l.all.p50} p90 ${l.all.p90} p99 ${l.all.p99} max ${l.all.max}` +
    (report.ok ? '' : ` — ${report.failures.join('; ')}`)
  );
}
