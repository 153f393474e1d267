/**
 * The nightly matrix (`workbench soak`, `npm run soak:matrix`; docs/chaos.md § The nightly matrix): every
 * planted bug (`workbench chaos --list-plants`) × N seeds of a short chaos run each, then one long soak
 * with every fault kind. Each cell is its own `workbench chaos … --json` child process, so a run that
 * crashes or hangs costs its cell only and every cell cleans up after itself as a user's run does.
 * Cells are appended to results.jsonl as they finish and the summary table is rewritten after each one,
 * so a matrix cut short (a machine's night is not always long enough) still has its table, and
 * `--resume` carries on from where it stopped.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The share of seeds a plant must be caught in (issue 26: at least 95 % of 20). */
export const CATCH_GOAL = 0.95;

export interface PlantCell {
  kind: 'plant';
  plant: string;
  seed: number;
  exit: number | null;
  caught: boolean;
  /** The anomaly (or property) the run named for the plant, when caught. */
  anomaly?: string;
  /** Why the cell says nothing (no JSON report, an error before the verdict). */
  error?: string;
  seconds: number;
}

export interface SoakCell {
  kind: 'soak';
  seed: number;
  durationMs: number;
  exit: number | null;
  ok: boolean;
  /** The properties that failed, or why there is no verdict. */
  failed: string[];
  faults: number;
  seconds: number;
}

export type Cell = PlantCell | SoakCell;

export interface MatrixPlan {
  plants: string[];
  seeds: number[];
  plantDurationMs: number;
  /** 0: no soak. */
  soakDurationMs: number;
  soakSeed: number;
}

/** What a chaos child printed and how it ended. */
export interface ChaosOutcome {
  exit: number | null;
  stdout: string;
  stderr: string;
  seconds: number;
}

/** Runs `workbench chaos` with these arguments as a child (the same CLI a user runs). */
export type RunChaos = (args: string[], signal: AbortSignal) => Promise<ChaosOutcome>;

/** The CLI this process is, run again with other arguments: `node dist/cli/main.js chaos …`. */
export function chaosChild(mainScript: string): RunChaos {
  return (args, signal) =>
    new Promise((resolve, reject) => {
      const started = Date.now();
      const child = spawn(process.execPath, [mainScript, 'chaos', ...args], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
      });
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      // Ctrl-C reaches the child as its own Ctrl-C: it stops its workloads and cleans up before exiting.
      const onAbort = () => child.kill('SIGINT');
      signal.addEventListener('abort', onAbort, { once: true });
      child.on('error', reject);
      child.on('close', (exit) => {
        signal.removeEventListener('abort', onAbort);
        resolve({ exit, stdout, stderr, seconds: Math.round((Date.now() - started) / 1000) });
      });
    });
}

/** The plants the chaos command knows, one per line of `chaos --list-plants`. */
export async function listPlants(run: RunChaos, signal: AbortSignal): Promise<string[]> {
  const outcome = await run(['--list-plants'], signal);
  if (outcome.exit !== 0)
    throw new Error(`workbench chaos --list-plants exited ${outcome.exit}: ${outcome.stderr.trim()}`);
  return outcome.stdout
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
}

function parseReport(outcome: ChaosOutcome): Record<string, unknown> | string {
  try {
    const report = JSON.parse(outcome.stdout) as unknown;
    if (report && typeof report === 'object') return report as Record<string, unknown>;
  } catch {}
  const why = (outcome.stderr.trim() || outcome.stdout.trim()).split('\n').at(-1) ?? '';
  return `no JSON report (exit ${outcome.exit})${why ? `: ${why.slice(0, 200)}` : ''}`;
}

/**
 * A plant run's verdict, read from the report's `plant` section: caught means the run failed (exit 1) and
 * named the anomaly the plant is known by. A run that failed for another reason is not a catch.
 */
export function plantVerdict(plant: string, seed: number, outcome: ChaosOutcome): PlantCell {
  const cell: PlantCell = {
    kind: 'plant',
    plant,
    seed,
    exit: outcome.exit,
    caught: false,
    seconds: outcome.seconds,
  };
  const report = parseReport(outcome);
  if (typeof report === 'string') return { ...cell, error: report };
  const verdict = report.plant as { name?: unknown; caught?: unknown; anomaly?: unknown } | undefined;
  if (!verdict || verdict.name !== plant)
    return { ...cell, error: `the report has no verdict for plant ${plant}` };
  const caught = verdict.caught === true && outcome.exit === 1;
  return {
    ...cell,
    caught,
    ...(caught && typeof verdict.anomaly === 'string' ? { anomaly: verdict.anomaly } : {}),
    ...(typeof report.error === 'string' ? { error: report.error } : {}),
  };
}

export function soakVerdict(seed: number, durationMs: number, outcome: ChaosOutcome): SoakCell {
  const cell: SoakCell = {
    kind: 'soak',
    seed,
    durationMs,
    exit: outcome.exit,
    ok: false,
    failed: [],
    faults: 0,
    seconds: outcome.seconds,
  };
  const report = parseReport(outcome);
  if (typeof report === 'string') return { ...cell, failed: [report] };
  const properties = Array.isArray(report.properties)
    ? (report.properties as Array<{ name?: unknown; ok?: unknown }>)
    : [];
  const failed = properties.filter((p) => p.ok !== true).map((p) => String(p.name));
  if (typeof report.error === 'string') failed.push(`run failed: ${report.error}`);
  if (properties.length === 0 && failed.length === 0) failed.push('no property was judged');
  return {
    ...cell,
    ok: outcome.exit === 0 && report.ok === true && failed.length === 0,
    failed,
    faults: Array.isArray(report.faults) ? report.faults.length : 0,
  };
}

const cellKey = (cell: Pick<Cell, 'kind' | 'seed'> & { plant?: string }) =>
  cell.kind === 'plant' ? `plant ${cell.plant} ${cell.seed}` : `soak ${cell.seed}`;

export function readCells(file: string): Cell[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line.trim())
    .map((line) => JSON.parse(line) as Cell);
}

/** The summary table: one row per plant (seeds caught of seeds run, the anomalies named), then the soak. */
export function summarize(plan: MatrixPlan, cells: Cell[]): { ok: boolean; markdown: string } {
  const lines = [
    '# Nightly matrix: planted bugs × seeds, and a soak with every fault kind',
    '',
    `Plants: ${plan.seeds.length} seeds each (${plan.seeds[0]}…${plan.seeds.at(-1)}), ${plan.plantDurationMs / 1000} s per run; goal: caught in ≥ ${CATCH_GOAL * 100} % of seeds.`,
    '',
    '| plant | seeds run | caught | share | anomalies named | not caught (seeds) |',
    '|---|---|---|---|---|---|',
  ];
  let ok = true;
  for (const plant of plan.plants) {
    const runs = cells.filter((c): c is PlantCell => c.kind === 'plant' && c.plant === plant);
    const caught = runs.filter((c) => c.caught);
    const share = runs.length ? caught.length / runs.length : 0;
    if (runs.length < plan.seeds.length || share < CATCH_GOAL) ok = false;
    const anomalies = [...new Set(caught.map((c) => c.anomaly ?? '?'))].join(', ') || '–';
    const missed = runs
      .filter((c) => !c.caught)
      .map((c) => (c.error ? `${c.seed} (${c.error})` : `${c.seed}`));
    lines.push(
      `| ${plant} | ${runs.length}/${plan.seeds.length} | ${caught.length} | ${Math.round(share * 100)} % | ${anomalies} | ${missed.join('; ') || '–'} |`,
    );
  }
  if (plan.soakDurationMs > 0) {
    const soak = cells.find((c): c is SoakCell => c.kind === 'soak' && c.seed === plan.soakSeed);
    lines.push('', `Soak: seed ${plan.soakSeed}, ${plan.soakDurationMs / 60_000} min, every fault kind: `);
    if (!soak) {
      ok = false;
      lines[lines.length - 1] += 'not run yet.';
    } else {
      if (!soak.ok) ok = false;
      lines[lines.length - 1] += soak.ok
        ? `every property held (${soak.faults} faults, ${soak.seconds} s).`
        : `FAILED: ${soak.failed.join('; ')} (exit ${soak.exit}).`;
    }
  }
  lines.push('', ok ? 'Verdict: every plant caught often enough, the soak held.' : 'Verdict: NOT met.');
  return { ok, markdown: `${lines.join('\n')}\n` };
}

/** The most a cell's stderr file keeps: its end, where a crash's stack is. */
const STDERR_KEPT_BYTES = 256 * 1024;

/**
 * A cell's stderr (the run's log lines, or the stack of a crash) in DIR/stderr/NAME.log: the table names
 * only its last line, and a cell with no verdict is read from here.
 */
function keepStderr(out: string, name: string, outcome: ChaosOutcome): void {
  mkdirSync(join(out, 'stderr'), { recursive: true });
  writeFileSync(join(out, 'stderr', `${name}.log`), outcome.stderr.slice(-STDERR_KEPT_BYTES));
}

export interface MatrixOptions {
  out: string;
  resume: boolean;
  log: (line: string) => void;
  signal: AbortSignal;
}

/** Runs the cells not yet in results.jsonl (all of them unless resuming); returns the summary. */
export async function runMatrix(
  plan: MatrixPlan,
  run: RunChaos,
  options: MatrixOptions,
): Promise<{ ok: boolean; markdown: string; interrupted: boolean }> {
  mkdirSync(options.out, { recursive: true });
  const resultsFile = join(options.out, 'results.jsonl');
  const summaryFile = join(options.out, 'summary.md');
  if (!options.resume) writeFileSync(resultsFile, '');
  const cells = readCells(resultsFile);
  const done = new Set(cells.map(cellKey));
  const record = (cell: Cell) => {
    cells.push(cell);
    appendFileSync(resultsFile, `${JSON.stringify(cell)}\n`);
    writeFileSync(summaryFile, summarize(plan, cells).markdown);
  };
  const duration = (ms: number) => `${Math.round(ms / 1000)}s`;
  for (const plant of plan.plants)
    for (const seed of plan.seeds) {
      if (options.signal.aborted) break;
      if (done.has(cellKey({ kind: 'plant', plant, seed }))) continue;
      const outcome = await run(
        ['--plant', plant, '--seed', String(seed), '--duration', duration(plan.plantDurationMs), '--json'],
        options.signal,
      );
      if (options.signal.aborted) break;
      keepStderr(options.out, `${plant}-${seed}`, outcome);
      const cell = plantVerdict(plant, seed, outcome);
      record(cell);
      options.log(
        `plant ${plant} seed ${seed}: ${cell.caught ? `caught (${cell.anomaly ?? '?'})` : `NOT caught${cell.error ? ` (${cell.error})` : ''}`}, ${cell.seconds} s`,
      );
    }
  if (
    plan.soakDurationMs > 0 &&
    !options.signal.aborted &&
    !done.has(cellKey({ kind: 'soak', seed: plan.soakSeed }))
  ) {
    options.log(`soak seed ${plan.soakSeed}, ${plan.soakDurationMs / 60_000} min, every fault kind…`);
    const outcome = await run(
      ['--seed', String(plan.soakSeed), '--duration', duration(plan.soakDurationMs), '--json'],
      options.signal,
    );
    if (!options.signal.aborted) {
      keepStderr(options.out, `soak-${plan.soakSeed}`, outcome);
      const cell = soakVerdict(plan.soakSeed, plan.soakDurationMs, outcome);
      record(cell);
      options.log(`soak: ${cell.ok ? 'every property held' : `FAILED: ${cell.failed.join('; ')}`}`);
    }
  }
  const summary = summarize(plan, cells);
  writeFileSync(summaryFile, summary.markdown);
  return { ...summary, interrupted: options.signal.aborted };
}
