/**
 * The cost of stream positions (issue 28, item 4): the cross-node fan-out of bench/fanout.ts (publishers on
 * node 1, subscribers on node 2, closed loop, the same payloads and window) on two clusters of ours side by
 * side, one with positions on (every publish placed and kept by the Redis script, receivers ordering by
 * offset) and one with STREAM_POSITIONS=off (at most once, no history). Runs interleave (on first, then
 * off first, …), so the machine's noise spreads over both; the figure is the median deliveries per second, on ÷ off (goal ≥ 0.8).
 */
import { type FanoutOptions, type FanoutRun, measure, type Rig, rig, startOurs } from './fanout.js';
import { median, round } from './lib/stats.js';

export interface PositionsResult {
  on: FanoutRun[];
  off: FanoutRun[];
  medianOn: number;
  medianOff: number;
  /** Median deliveries per second, positions on ÷ off. */
  ratioOnToOff: number;
  /** The runs' own ratios (run i on ÷ run i off), for the spread. */
  runRatios: number[];
}

export async function benchStreamPositions(options: FanoutOptions): Promise<PositionsResult> {
  const rigs: Rig[] = [];
  const on: FanoutRun[] = [];
  const off: FanoutRun[] = [];
  try {
    const systems = [
      await startOurs(undefined, { name: 'positions-on', env: { STREAM_POSITIONS: 'on' } }),
      await startOurs(undefined, { name: 'positions-off', env: { STREAM_POSITIONS: 'off' } }),
    ];
    for (const system of systems) rigs.push(await rig(system, options));
    // Which goes first alternates, so neither always measures on a machine the other just warmed up.
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
  const medianOn = median(on.map((r) => r.deliveriesPerSecond));
  const medianOff = median(off.map((r) => r.deliveriesPerSecond));
  return {
    on,
    off,
    medianOn: Math.round(medianOn),
    medianOff: Math.round(medianOff),
    ratioOnToOff: round(medianOn / medianOff, 3),
    runRatios: on.map((r, i) => round(r.deliveriesPerSecond / off[i]!.deliveriesPerSecond, 3)),
  };
}
