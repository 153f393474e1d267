/**
 * `workbench chaos --seed S [--duration 120s] [--faults N] [--history FILE] [--json] [--keep]`: a local
 * cluster with throw-away Postgres and Redis under load, schedules and a clock, hit by a seeded fault
 * schedule; then one line per property. Exit 0 when every property holds, 1 on a violation (or a run that
 * could not be made), 2 when called wrongly. The same seed gives the same faults at the same times on the
 * same nodes. `--history FILE` records every operation (docs/chaos.md § History). `--plant NAME` (tests
 * only) starts the brokers with one planted bug (broker/plants.ts) and reports whether the run caught it;
 * `--list-plants` prints their names.
 *
 * `workbench chaos check HISTORY [--json]`: the independent checkers (cli/checkers/) over a history:
 * exit 0 when clean, 1 naming each anomaly with its operations, 2 for a bad call, an unreadable file or a
 * malformed line.
 */
import { CHAOS_PLANT_NAMES } from '../../broker/plants.js';
import { defineCommand, durationOption, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { defaultFaultCount, FAULT_KINDS, type FaultKind, isFaultKind, maxFaults } from '../chaos/faults.js';
import { plantKinds, plantOption } from '../chaos/plants.js';
import { type ChaosReport, planFor, runChaos } from '../chaos/run.js';
import { checkHistory } from '../checkers/check.js';
import { HistoryFormatError } from '../history/format.js';
import { HistoryWriter } from '../history/writer.js';

const OPTIONS = {
  seed: {
    type: 'string',
    value: 'S',
    help: "the fault schedule's seed (required; a whole number below 1e9)",
  },
  duration: { type: 'string', value: 'D', help: 'how long the run lasts (30s to 24h; default 120s)' },
  faults: {
    type: 'string',
    value: 'N',
    help: 'how many faults (default: by duration; each needs 6 s to recover)',
  },
  history: { type: 'string', value: 'FILE', help: 'record every operation to FILE (JSON lines)' },
  kinds: {
    type: 'string',
    value: 'K,…',
    help: `only these fault kinds, comma-separated (default: all of ${FAULT_KINDS.join(', ')})`,
  },
  json: { type: 'boolean', help: 'the report as one JSON document' },
  keep: { type: 'boolean', help: 'keep the cluster, its database and logs afterwards' },
  plant: {
    type: 'string',
    value: 'NAME',
    help: 'tests only: run with one planted bug (its own fault kinds unless --kinds); the report says if it was caught',
  },
  'list-plants': { type: 'boolean', help: 'print the planted bugs --plant knows, one per line' },
} as const satisfies OptionSpec;

export const chaosCommand = defineCommand({
  synopsis: [
    'chaos --seed S [--duration 120s] [--faults N] [--kinds K,…] [--history FILE] [--json] [--keep] [--plant NAME]',
    'chaos --list-plants',
    'chaos check HISTORY [--json]',
  ],
  about: `A throw-away cluster under load hit by seeded faults; exit 1 if a message was lost or duplicated, a chain
broke, a schedule or tick repeated. The same seed gives the same faults at the same times. "check HISTORY"
runs the independent checkers over a recorded history (exit 1 naming each anomaly, 2 for a malformed line).
"--plant NAME" (tests only) plants one known bug in the run; "--list-plants" names them.`,
  options: OPTIONS,
  run: runChaosCommand,
});

async function runChaosCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  if (positionals[0] === 'check') return runCheck(values, positionals.slice(1));
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (values['list-plants']) return listPlants(values);
  const plant = plantOption(values.plant);
  if (values.seed === undefined) throw new UsageError('--seed S is required (a whole number below 1e9)');
  if (!/^\d{1,9}$/.test(values.seed)) throw new UsageError('--seed must be a whole number below 1e9');
  const seed = Number(values.seed);
  const durationMs = durationOption('--duration', values.duration, 120_000);
  if (durationMs < 30_000 || durationMs > 24 * 3600_000)
    throw new UsageError('--duration must be from 30s to 24h');
  const kinds = kindsOption(values.kinds) ?? plantKinds(plant);
  const most = maxFaults(durationMs);
  let faults = defaultFaultCount(durationMs, kinds?.length);
  if (values.faults !== undefined) {
    if (!/^\d+$/.test(values.faults) || Number(values.faults) < 1 || Number(values.faults) > most)
      throw new UsageError(
        `--faults must be a whole number from 1 to ${most} (each fault needs 6 s to recover in a run of ${durationMs / 1000} s)`,
      );
    faults = Number(values.faults);
  }
  if (values.history !== undefined) {
    // A path that cannot be written is a wrong call, found before anything starts.
    try {
      new HistoryWriter(values.history).close();
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  }
  const json = Boolean(values.json);
  const log = json ? () => {} : (line: string) => console.log(line);

  log(`chaos seed ${seed}: ${durationMs / 1000} s, ${faults} faults${plant ? `, PLANTED BUG ${plant}` : ''}`);
  for (const fault of planFor({ seed, durationMs, faults, kinds }))
    log(`  planned +${(fault.atMs / 1000).toFixed(1)} s  ${fault.description}`);

  const stop = new AbortController();
  // Ctrl-C stops the run and still cleans up; a second one is swallowed so the clean-up finishes.
  const onSignal = () => {
    if (!stop.signal.aborted) log('interrupted: stopping the workloads and cleaning up…');
    stop.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  let report: ChaosReport;
  try {
    report = await runChaos({
      seed,
      durationMs,
      faults,
      history: values.history,
      kinds,
      keep: Boolean(values.keep),
      log,
      signal: stop.signal,
      plant,
    });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  if (json) console.log(JSON.stringify(report, null, 2));
  else {
    print(report);
    if (values.history && report.history)
      console.log(`history: ${report.history.operations} operations in ${report.history.path}`);
  }
  return report.ok ? 0 : 1;
}

/** `--list-plants`: the names, one per line; it takes no other option. */
function listPlants(values: Parsed<typeof OPTIONS>['values']): number {
  const others = Object.entries(values).filter(([name, v]) => name !== 'list-plants' && v !== undefined);
  if (others.length > 0) throw new UsageError(`--list-plants takes no other option, not --${others[0]![0]}`);
  for (const name of CHAOS_PLANT_NAMES) console.log(name);
  return 0;
}

/** `--kinds a,b`: known kinds, each once; absent, every kind. */
function kindsOption(value: string | undefined): FaultKind[] | undefined {
  if (value === undefined) return undefined;
  const names = value.split(',').map((name) => name.trim());
  const unknown = names.filter((name) => !isFaultKind(name));
  if (names.length === 0 || unknown.length > 0 || new Set(names).size !== names.length)
    throw new UsageError(
      `--kinds must name fault kinds once each, comma-separated, from ${FAULT_KINDS.join(', ')}` +
        (unknown.length > 0 ? ` (unknown: ${unknown.join(', ')})` : ''),
    );
  return names as FaultKind[];
}

function print(report: ChaosReport): void {
  console.log(`\nchaos seed ${report.seed} faults:`);
  for (const f of report.faults) {
    const when =
      f.startedAtMs === undefined
        ? 'never ran'
        : `+${(f.startedAtMs / 1000).toFixed(1)} s → +${((f.endedAtMs ?? f.startedAtMs) / 1000).toFixed(1)} s`;
    const note = f.note ? `  (${f.note})` : '';
    console.log(`  ${when.padEnd(20)} ${f.description}${note}${f.error ? `  FAILED: ${f.error}` : ''}`);
  }
  console.log('');
  for (const p of report.properties) {
    console.log(`${p.ok ? 'ok  ' : 'FAIL'} ${p.name.padEnd(18)} ${p.summary}`);
    for (const problem of p.problems) console.log(`       ${problem}`);
  }
  if (report.plant)
    console.log(
      report.plant.caught
        ? `plant ${report.plant.name}: caught (${report.plant.anomaly})`
        : `plant ${report.plant.name}: NOT caught (expected one of ${report.plant.expected.join(', ')})`,
    );
  if (report.error) console.log(`chaos run failed: ${report.error}`);
  if (report.interrupted) console.log('chaos run interrupted: nothing judged');
  if (report.kept)
    console.log(
      `kept: ${report.kept.dir} (logs in .workbench/logs; "workbench down" there), postgres ${report.kept.postgres} ` +
        `(runuser -u postgres -- pg_ctl -D ${report.kept.postgres}/data stop), redis-server pid ${report.kept.redisPid}`,
    );
  console.log(
    report.ok
      ? `chaos seed ${report.seed}: every property held`
      : `chaos seed ${report.seed}: FAILED — replay with: workbench chaos --seed ${report.seed} --duration ${report.durationMs / 1000}s --faults ${report.faults.length}${report.kinds ? ` --kinds ${report.kinds.join(',')}` : ''}${report.plant ? ` --plant ${report.plant.name}` : ''}`,
  );
}

/** `chaos check HISTORY`: the only options it takes are --json. */
async function runCheck(values: Parsed<typeof OPTIONS>['values'], args: string[]): Promise<number> {
  const others = Object.entries(values).filter(([name, v]) => name !== 'json' && v !== undefined);
  if (others.length > 0) throw new UsageError(`chaos check takes only --json, not --${others[0]![0]}`);
  if (args.length !== 1) throw new UsageError('chaos check needs exactly one HISTORY file');
  let result: Awaited<ReturnType<typeof checkHistory>>;
  try {
    result = await checkHistory(args[0]!);
  } catch (error) {
    const what = error instanceof HistoryFormatError ? 'malformed history' : 'cannot read the history';
    console.error(`chaos check: ${what} ${args[0]}: ${(error as Error).message}`);
    return 2;
  }
  if (values.json) console.log(JSON.stringify(result, null, 2));
  else {
    for (const [checker, summary] of Object.entries(result.summaries))
      console.log(`${checker.padEnd(10)} ${summary}`);
    for (const a of result.anomalies)
      console.log(`ANOMALY ${a.kind}: ${a.message} (operations ${a.operations.join(', ')})`);
    const counts = Object.entries(result.counts).map(([kind, n]) => `${n} ${kind}`);
    console.log(
      `${result.events} operations checked in ${result.seconds.toFixed(2)} s (${result.operationsPerSecond.toLocaleString('en-US')} operations/s): ` +
        (result.ok ? 'no anomaly' : `${counts.join(', ')}`),
    );
  }
  return result.ok ? 0 : 1;
}
