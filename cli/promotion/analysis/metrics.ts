/**
 * The analysis's own series (docs/observability.md § The promotion's analysis): every measurement counted
 * by environment, metric, stage and outcome, and its last value. `promote` is a process of minutes, not a
 * scrape target: with `--metrics-file FILE` it rewrites FILE (whole, renamed over it) after each
 * measurement in Prometheus's text format, for node_exporter's textfile collector (or any reader).
 */
import { renameSync, writeFileSync } from 'node:fs';
import { Counter, Gauge, Registry } from 'prom-client';
import type { Measurement } from './run.js';

export class AnalysisMetrics {
  readonly registry = new Registry();

  readonly measurements = new Counter({
    name: 'mesh_workbench_analysis_measurements_total',
    help: "A promotion analysis's measurements, by environment, metric, stage (baseline: before the flip; bake: after it) and outcome (successful, failed, inconclusive, error)",
    labelNames: ['environment', 'metric', 'stage', 'outcome'] as const,
    registers: [this.registry],
  });

  readonly lastValue = new Gauge({
    name: 'mesh_workbench_analysis_last_value',
    help: "The first value of a promotion analysis metric's last measurement that had data",
    labelNames: ['environment', 'metric', 'stage'] as const,
    registers: [this.registry],
  });

  constructor(
    private readonly environment: string,
    private readonly file?: string,
  ) {}

  async record(measurement: Measurement): Promise<void> {
    const labels = { environment: this.environment, metric: measurement.metric, stage: measurement.stage };
    this.measurements.inc({ ...labels, outcome: measurement.outcome });
    const first = measurement.values?.[0];
    if (first !== undefined && !Number.isNaN(first)) this.lastValue.set(labels, first);
    if (this.file) {
      const temporary = `${this.file}.${process.pid}.tmp`;
      writeFileSync(temporary, await this.registry.metrics());
      renameSync(temporary, this.file);
    }
  }
}
