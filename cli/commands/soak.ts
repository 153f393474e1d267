/**
 * `workbench soak [--seeds 20] [--first-seed 1] [--plants A,…] [--plant-duration 2m] [--soak 30m]
 * [--soak-seed S] [--out DIR] [--resume]`: the nightly matrix (cli/soak/matrix.ts; `npm run soak:matrix`).
 * Every planted bug × seeds, then a soak with every fault kind, one `workbench chaos` child per cell; the
 * table goes to DIR/summary.md, the cells to DIR/results.jsonl. Exit 0 when every plant was caught in
 * ≥ 95 % of its seeds and the soak held, 1 when not (or cut short), 2 when called wrongly.
 */
import { fileURLToPath } from 'node:url';
import {
  defineCommand,
  durationOption,
  type OptionSpec,
  type Parsed,
  UsageError,
  wholeNumber,
} from '../args.js';
import { chaosChild, listPlants, type MatrixPlan, runMatrix } from '../soak/matrix.js';

const OPTIONS = {
  seeds: { type: 'string', value: 'N', help: 'seeds per plant (default 20)' },
  'first-seed': { type: 'string', value: 'S', help: 'the first seed; the others follow it (default 1)' },
  plants: { type: 'string', value: 'A,…', help: 'only these plants (default: every one chaos lists)' },
  'plant-duration': { type: 'string', value: 'D', help: 'each plant run (default 2m)' },
  soak: { type: 'string', value: 'D', help: 'the soak with every fault kind (default 30m; 0 for none)' },
  'soak-seed': { type: 'string', value: 'S', help: "the soak's seed (default 20240611)" },
  out: {
    type: 'string',
    value: 'DIR',
    help: 'where results.jsonl and summary.md go (default test-results/soak-matrix)',
  },
  resume: { type: 'boolean', help: 'keep the cells DIR/results.jsonl has and run only the rest' },
} as const satisfies OptionSpec;

export const soakCommand = defineCommand({
  synopsis: [
    'soak [--seeds 20] [--first-seed 1] [--plants A,…] [--plant-duration 2m] [--soak 30m] [--soak-seed S] [--out DIR] [--resume]',
  ],
  about: `The nightly matrix: every planted bug of "chaos --list-plants" × seeds, then a soak with every fault
kind, each a "workbench chaos" run of its own. Writes DIR/summary.md (the table) and DIR/results.jsonl. Exit 0
when every plant was caught in at least 95 % of its seeds and the soak held, 1 otherwise, 2 when called wrongly.`,
  options: OPTIONS,
  run: runSoakCommand,
});

/** A whole-number option with its default when it is not given. */
const count = (name: string, value: string | undefined, fallback: number, min: number, max: number) =>
  value === undefined ? fallback : wholeNumber(name, value, min, max);

async function runSoakCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const seeds = count('--seeds', values.seeds, 20, 0, 1000);
  const first = count('--first-seed', values['first-seed'], 1, 0, 999_999_000);
  const soakSeed = count('--soak-seed', values['soak-seed'], 20240611, 0, 999_999_999);
  const plantDurationMs = durationOption('--plant-duration', values['plant-duration'], 120_000);
  if (plantDurationMs < 30_000 || plantDurationMs > 3600_000)
    throw new UsageError('--plant-duration must be from 30s to 1h');
  const soakDurationMs = values.soak === '0' ? 0 : durationOption('--soak', values.soak, 30 * 60_000);
  if (soakDurationMs !== 0 && (soakDurationMs < 30_000 || soakDurationMs > 24 * 3600_000))
    throw new UsageError('--soak must be 0 or from 30s to 24h');

  const stop = new AbortController();
  const onSignal = () => {
    if (!stop.signal.aborted)
      console.log('interrupted: the running cell cleans up, then the table is written…');
    stop.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const run = chaosChild(fileURLToPath(new URL('../main.js', import.meta.url)));
    const known = seeds > 0 ? await listPlants(run, stop.signal) : [];
    let plants = known;
    if (values.plants !== undefined) {
      plants = values.plants.split(',').map((name) => name.trim());
      const unknown = plants.filter((name) => !known.includes(name));
      if (plants.length === 0 || unknown.length > 0 || new Set(plants).size !== plants.length)
        throw new UsageError(
          `--plants must name plants once each, comma-separated, from ${known.join(', ')}` +
            (unknown.length > 0 ? ` (unknown: ${unknown.join(', ')})` : ''),
        );
    }
    const plan: MatrixPlan = {
      plants: seeds > 0 ? plants : [],
      seeds: Array.from({ length: seeds }, (_, i) => first + i),
      plantDurationMs,
      soakDurationMs,
      soakSeed,
    };
    const out = values.out ?? 'test-results/soak-matrix';
    console.log(
      `soak matrix: ${plan.plants.length} plants × ${seeds} seeds of ${plantDurationMs / 1000} s` +
        (soakDurationMs ? `, then a ${soakDurationMs / 60_000} min soak (seed ${soakSeed})` : '') +
        `; results in ${out}`,
    );
    const result = await runMatrix(plan, run, {
      out,
      resume: Boolean(values.resume),
      log: (line) => console.log(line),
      signal: stop.signal,
    });
    console.log(`\n${result.markdown}`);
    return result.ok && !result.interrupted ? 0 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
