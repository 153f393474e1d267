/**
 * The workload section of a chaos report: the capacity measured before the faults (./capacity.ts), the
 * target taken from it, the rates offered, and what was accepted per kind and per second; and the
 * `workload` property, which fails when a kind accepted nothing (a kind that never ran proved nothing).
 */
import type { Capacity } from './capacity.js';
import type { Property } from './verify.js';
import { LOAD_SHAPE, type WorkloadRates } from './workloads.js';

/** Every kind the chaos workload drives, in report order. */
export const WORKLOAD_KINDS = [
  'dm',
  'broadcast',
  'group',
  'stream',
  'mcp',
  'schedule',
  'watch',
  'clock',
] as const;
export type WorkloadKind = (typeof WORKLOAD_KINDS)[number];

export interface WorkloadReport {
  capacity: Capacity;
  /** Durable sends per second the workload offers (dm + broadcast + group) and the fraction it is. */
  target: { durablePerSecond: number; fraction: number };
  offered: WorkloadRates;
  /** Peers of the load and where they start (the load balancer and every node). */
  peers: number;
  entries: string[];
  /**
   * Accepted per kind: sends, stream publishes and MCP calls answered `ok`; schedules created; watch
   * notifications received; clock ticks received (every observer's).
   */
  accepted: Record<WorkloadKind, number>;
  /** `accepted` over the load's duration, per second. */
  perSecond: Record<WorkloadKind, number>;
  /** dm + broadcast + group accepted per second, against the target. */
  durablePerSecond: number;
}

export function workloadReport(
  facts: Omit<WorkloadReport, 'perSecond' | 'durablePerSecond' | 'target' | 'peers'> & {
    targetPerSecond: number;
    durationMs: number;
  },
): WorkloadReport {
  const seconds = Math.max(facts.durationMs, 1) / 1000;
  const rate = (n: number) => Math.round((n / seconds) * 10) / 10;
  const perSecond = Object.fromEntries(WORKLOAD_KINDS.map((k) => [k, rate(facts.accepted[k])])) as Record<
    WorkloadKind,
    number
  >;
  const { targetPerSecond, durationMs: _, ...rest } = facts;
  return {
    ...rest,
    target: { durablePerSecond: targetPerSecond, fraction: LOAD_SHAPE.fraction },
    peers: LOAD_SHAPE.peers,
    perSecond,
    durablePerSecond: rate(facts.accepted.dm + facts.accepted.broadcast + facts.accepted.group),
  };
}

/** One line: capacity, target, achieved, per kind. */
export function workloadSummary(w: WorkloadReport): string {
  const kinds = WORKLOAD_KINDS.map((k) => `${k} ${w.accepted[k]} (${w.perSecond[k]}/s)`).join(', ');
  return (
    `capacity ${w.capacity.dmPerSecond} DM/s (p99 ≤ ${w.capacity.p99BoundMs} ms), target ${w.target.durablePerSecond} durable sends/s ` +
    `(${w.target.fraction * 100} %), achieved ${w.durablePerSecond}/s; accepted ${kinds}`
  );
}

export function workloadProperty(w: WorkloadReport): Property {
  const idle = WORKLOAD_KINDS.filter((k) => w.accepted[k] === 0);
  return {
    name: 'workload',
    ok: idle.length === 0,
    summary: workloadSummary(w),
    problems: idle.map((k) => `no ${k} was accepted`),
  };
}
