/**
 * f) `workbench` start-up: the wall time of whole CLI processes, `--help`, `flags list` and `flags set` (a
 * file flag provider, a fresh migrated database and the machine's Redis for the push: no cluster, no
 * network beyond loopback), next to the physical floor of the same machine at the same moment, `node -e ''`
 * (a Node process that loads nothing).
 * The runs are interleaved (floor, then each command of each binary, again and again) so a burst of load
 * from the shared machine falls on all of them alike; medians, and each command's own share (median minus
 * the floor's). `--cli-before PATH` measures an older build's dist/cli/main.js in the same run too.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_REDIS_URL } from '../cli/database.js';
import { createDatabase, flagsFolder, WORKBENCH } from './lib/processes.js';
import { median, round } from './lib/stats.js';

export interface CliStartupFigure {
  binary: string;
  command: string;
  runsMs: number[];
  medianMs: number;
  /** Median minus the floor's median: what the CLI itself costs. */
  ownMs: number;
  floorMedianMs: number;
}

/** One process to completion, its wall time in ms; a failed run fails the scenario (no silent figures). */
function timed(args: string[], cwd: string): number {
  const started = process.hrtime.bigint();
  const result = spawnSync(process.execPath, args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  if (result.status !== 0)
    throw new Error(`node ${args.join(' ')} exited ${result.status}: ${result.stderr.toString().trim()}`);
  return ms;
}

export async function benchCliStartup(options: {
  runs: number;
  /** Another build's dist/cli/main.js, measured alongside (the "before" of a change). */
  before?: string;
}): Promise<CliStartupFigure[]> {
  const databaseUrl = await createDatabase('cli');
  const flags = flagsFolder([]);
  // A folder of its own: no .workbench/ or environments/ of the checkout changes what the commands read.
  const cwd = mkdtempSync(join(tmpdir(), 'wb-bench-cli-'));
  try {
    const binaries: Array<[string, string]> = [
      ['current', WORKBENCH],
      ...(options.before ? [['before', options.before] as [string, string]] : []),
    ];
    const provider = [
      '--env',
      flags.env,
      '--provider',
      'file',
      '--flags-dir',
      flags.dir,
      '--database-url',
      databaseUrl,
    ];
    // A flip end to end: written, read back, audited, "refresh now" pushed (to a channel no node listens
    // on). On, then off, in every round: each run is a real change, never a no-op.
    const flip = (value: 'on' | 'off'): [string, string[]] => [
      `flags set ${value}`,
      ['flags', 'set', 'ha.audit', value, ...provider, '--redis-url', DEFAULT_REDIS_URL, '--actor', 'bench'],
    ];
    const commands: Array<[string, string[]]> = [
      ['--help', ['--help']],
      ['flags list', ['flags', 'list', ...provider]],
      flip('on'),
      flip('off'),
    ];
    const floor: number[] = [];
    const runs = new Map<string, number[]>();
    // One unmeasured round first: the file system cache warm for every binary alike.
    const measureRound = (record: boolean) => {
      const ms = timed(['-e', ''], cwd);
      if (record) floor.push(ms);
      for (const [binary, main] of binaries)
        for (const [command, args] of commands) {
          const ms = timed([main, ...args], cwd);
          if (!record) continue;
          const key = `${binary}\u0000${command}`;
          runs.set(key, [...(runs.get(key) ?? []), ms]);
        }
    };
    measureRound(false);
    for (let i = 0; i < options.runs; i++) measureRound(true);
    const floorMedianMs = round(median(floor));
    return [
      {
        binary: 'floor',
        command: "node -e ''",
        runsMs: floor.map((ms) => round(ms)),
        medianMs: floorMedianMs,
        ownMs: 0,
        floorMedianMs,
      },
      ...[...runs].map(([key, values]) => {
        const [binary, command] = key.split('\u0000') as [string, string];
        const medianMs = round(median(values));
        return {
          binary,
          command,
          runsMs: values.map((ms) => round(ms)),
          medianMs,
          ownMs: round(medianMs - floorMedianMs),
          floorMedianMs,
        };
      }),
    ];
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
}
