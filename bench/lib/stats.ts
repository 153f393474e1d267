/** Medians of repeated runs, and latency percentiles (the same nearest-rank rule as `workbench load`). */
export { percentiles } from '../../cli/load/report.js';

export const median = (values: number[]) => {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};

export const round = (value: number, digits = 1) => Math.round(value * 10 ** digits) / 10 ** digits;
