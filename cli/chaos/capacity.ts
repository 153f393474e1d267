/**
 * The capacity of the chaos cluster, measured in the run itself before the first fault (issue 26 item 6):
 * a bounded probe of durable DMs at rising offered rates, each step a few seconds of the `workbench load`
 * generator on peers spread over the load balancer and every node. A step passes when the cluster accepted
 * at least 90 % of what was offered and the DMs' p99 (send to first delivery) stayed under the bound; the
 * capacity is the accepted rate of the last step that passed. It is measured through the brokers' own
 * Postgres and Redis proxies (./partitions.ts), which is right: it is this cluster's capacity.
 */
import { DeliveryChecker } from '../load/checker.js';
import { generateLoad } from '../load/generator.js';
import { percentiles } from '../load/report.js';
import { createLoadMeshes } from '../load/setup.js';
import { type ChaosCluster, loadEntries } from './workloads.js';

/** Offered DM rates (per second over all probe peers), tried in order until one fails. */
export const PROBE_RATES = [10, 20, 40, 80, 160, 320];
const PROBE_STEP_MS = 3000;
const PROBE_DRAIN_MS = 3000;
/** One request in flight per peer: 32 peers keep 320/s offered at up to 100 ms a round trip. */
const PROBE_PEERS = 32;
/**
 * A step whose DM p99 (send to first delivery) is past this has passed the knee. Half a second: durable
 * (fsync) commits and cross-node wake-ups on a shared 2-core machine already take a few hundred ms at p99.
 */
export const PROBE_P99_BOUND_MS = 500;

export interface ProbeStep {
  offered: number;
  accepted: number;
  acceptedPerSecond: number;
  p99Ms: number;
  /** Accepted DMs not delivered by the end of the step's drain. */
  lost: number;
  ok: boolean;
}

export interface Capacity {
  /** Durable DMs per second the cluster accepted with p99 under the bound (the last step that passed). */
  dmPerSecond: number;
  p99BoundMs: number;
  steps: ProbeStep[];
}

/** Whether a step passed: most of the offer accepted, every accepted DM delivered, p99 under the bound. */
export function stepPassed(step: Omit<ProbeStep, 'ok'>): boolean {
  return step.acceptedPerSecond >= 0.9 * step.offered && step.p99Ms <= PROBE_P99_BOUND_MS && step.lost === 0;
}

/** Runs the steps (about 6 × 7 s at most) and returns what passed; throws only if the peers cannot connect. */
export async function probeCapacity(
  cluster: ChaosCluster,
  signal: AbortSignal,
  log: (line: string) => void,
): Promise<Capacity> {
  const steps: ProbeStep[] = [];
  let capacity = 0;
  for (const offered of PROBE_RATES) {
    if (signal.aborted) break;
    // Fresh members each step: the last step's unacked messages would be replayed to the same members at
    // their hello, with seqs the new step reuses (a new checker would take them for its own).
    const plans = await createLoadMeshes(
      { url: cluster.adminUrl, token: cluster.adminToken },
      { peers: PROBE_PEERS, meshes: 2 },
    );
    const checker = new DeliveryChecker();
    const facts = await generateLoad(
      {
        wsUrls: loadEntries(cluster),
        plans,
        rates: { dm: offered, broadcast: 0, group: 0, stream: 0 },
        durationMs: PROBE_STEP_MS,
        maxMessages: 1_000_000,
        drainMs: PROBE_DRAIN_MS,
        signal,
      },
      checker,
    );
    const result = checker.result();
    const measured = {
      offered,
      accepted: result.accepted.dm,
      acceptedPerSecond: Math.round((result.accepted.dm / Math.max(facts.durationMs, 1)) * 1000),
      p99Ms: percentiles(result.latencies.dm).p99,
      lost: result.lost,
    };
    const step = { ...measured, ok: stepPassed(measured) };
    steps.push(step);
    log(
      `  capacity probe: ${offered} DM/s offered, ${step.acceptedPerSecond}/s accepted, p99 ${step.p99Ms} ms, ${step.lost} undelivered: ${step.ok ? 'ok' : 'past the knee'}`,
    );
    if (!step.ok) break;
    capacity = step.acceptedPerSecond;
  }
  return { dmPerSecond: capacity, p99BoundMs: PROBE_P99_BOUND_MS, steps };
}
