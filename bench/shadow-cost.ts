/**
 * The cost of shadow mode (issue 27 item 3, docs/flags.md § Shadow): the same cluster and load with the
 * rows that have a comparator and are off in the scenario (`ha.connection-cap`, `ha.rate-limits`,
 * `ha.schedules`) at "shadow" against the same flags off. Every send takes a rate-limit point, so in
 * shadow every DM is also compared against shared buckets on the shadow copy in Redis.
 * - fan-out: bench/fanout.ts's cross-node stream fan-out on two clusters side by side, runs interleaved
 *   (on first, then off first, …) as bench/stream-positions.ts does;
 * - DMs: bench/dms.ts's closed loop, off then on (each its own cluster, so not interleaved).
 * The figures are the medians, shadow on ÷ off (goal ≥ 0.8 for both), and each side's comparison counts.
 */
import type { FlagKey } from '../flags/registry.js';
import { benchDms, type DmOptions } from './dms.js';
import { type FanoutOptions, type FanoutRun, measure, type Rig, rig, startOurs } from './fanout.js';
import { median, round } from './lib/stats.js';

export const SHADOWED: FlagKey[] = ['ha.connection-cap', 'ha.rate-limits', 'ha.schedules'];

export interface ShadowCostResult {
  fanout: { medianOn: number; medianOff: number; ratioOnToOff: number; runRatios: number[] };
  dms: { medianOn: number; medianOff: number; ratioOnToOff: number };
}

async function fanoutSides(options: FanoutOptions): Promise<{ on: FanoutRun[]; off: FanoutRun[] }> {
  const rigs: Rig[] = [];
  const on: FanoutRun[] = [];
  const off: FanoutRun[] = [];
  try {
    const systems = [
      await startOurs(undefined, { name: 'shadow-on', env: {}, shadow: SHADOWED }),
      await startOurs(undefined, { name: 'shadow-off', env: {} }),
    ];
    for (const system of systems) rigs.push(await rig(system, options));
    for (let i = 0; i < options.runs; i++) {
      if (i % 2 === 0) on.push((await measure(rigs[0]!, options)).run);
      off.push((await measure(rigs[1]!, options)).run);
      if (i % 2 === 1) on.push((await measure(rigs[0]!, options)).run);
    }
  } finally {
    for (const r of rigs) {
      for (const close of r.closers) close();
      for (const publisher of r.publishers) publisher.close();
    }
  }
  return { on, off };
}

export async function benchShadowCost(fanout: FanoutOptions, dms: DmOptions): Promise<ShadowCostResult> {
  const { on, off } = await fanoutSides(fanout);
  const fanOn = median(on.map((r) => r.deliveriesPerSecond));
  const fanOff = median(off.map((r) => r.deliveriesPerSecond));
  const dmOff = (await benchDms({ ...dms, label: 'dms_shadow_off' })).medianPerSecond;
  const dmOn = (await benchDms({ ...dms, label: 'dms_shadow_on', shadow: SHADOWED })).medianPerSecond;
  return {
    fanout: {
      medianOn: Math.round(fanOn),
      medianOff: Math.round(fanOff),
      ratioOnToOff: round(fanOn / fanOff, 3),
      runRatios: on.map((r, i) => round(r.deliveriesPerSecond / off[i]!.deliveriesPerSecond, 3)),
    },
    dms: { medianOn: Math.round(dmOn), medianOff: Math.round(dmOff), ratioOnToOff: round(dmOn / dmOff, 3) },
  };
}
