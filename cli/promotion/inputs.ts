/**
 * A promotion's inputs, read and checked before anything changes (issue 27 items 1 and 2): the target
 * phase, the policy's environment name, the expectations (a file's or a phase folder's), the analysis
 * and the Prometheus it asks. A bad one is a
 * UsageError naming the field (exit 2): the promotion stops before it opens the database, so a missing
 * file never costs a smoke run and a flip.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { packageRoot } from '../../broker/paths.js';
import { UsageError } from '../args.js';
import { ENVIRONMENT_NAME, type Environment } from '../environments/environment.js';
import { CHECK_NAMES, type Expectations } from '../smoke/run.js';
import { type AnalysisChoice, analysisInput, phaseAnalysisPath } from './analysis/stage.js';

/** `--to N`, `--flags-phase N`: a phase from 0 to 4, named in the message. */
export function phaseOption(option: string, value: string | undefined): number {
  if (value === undefined || !/^[0-4]$/.test(value))
    throw new UsageError(`${option} must be 0, 1, 2, 3 or 4${value === undefined ? '' : `, not "${value}"`}`);
  return Number(value);
}

/** An environment name given as an option (`--env`, `--require-passed-in`). */
export function environmentNameOption(option: string, value: string | undefined): string | undefined {
  if (value !== undefined && !ENVIRONMENT_NAME.test(value))
    throw new UsageError(
      `${option} must be an environment name (letters, digits, _ and -; at most 64), not "${value}"`,
    );
  return value;
}

const ExpectationsSchema = z.looseObject({
  checks: z.record(
    z.string(),
    // Besides expect and gap an entry may carry notes for its readers (why).
    z.looseObject({ expect: z.enum(['pass', 'expected-fail', 'n/a']), gap: z.string().optional() }),
  ),
});

/**
 * Reads and checks an expectations file: JSON, `checks` an object whose keys are smoke checks and whose
 * values say `expect` (pass, expected-fail, n/a) and maybe `gap`. `label` names where it came from.
 */
export function readExpectations(path: string, label: string): Expectations {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new UsageError(`${label}: cannot read ${path} (${code === 'ENOENT' ? 'no such file' : code})`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new UsageError(`${label}: ${path} is not valid JSON (${(error as Error).message})`);
  }
  const parsed = ExpectationsSchema.safeParse(raw);
  if (!parsed.success) {
    const problems = parsed.error.issues.map(
      (issue) => `${issue.path.join('.') || '(file)'}: ${issue.message}`,
    );
    throw new UsageError(`${label}: ${path}: ${problems.join('; ')}`);
  }
  const unknown = Object.keys(parsed.data.checks).filter((name) => !CHECK_NAMES.includes(name));
  if (unknown.length > 0)
    throw new UsageError(`${label}: ${path}: checks.${unknown[0]}: no such smoke check`);
  return parsed.data;
}

/** A phase folder's own expectations (`phases/phaseN/expectations.json`), checked the same way. */
export function phaseExpectations(phase: number): Expectations {
  const path = join(packageRoot(), 'phases', `phase${phase}`, 'expectations.json');
  return readExpectations(path, `phase ${phase} expectations`);
}

/** The target's expectations: `--expectations FILE` when given, else its phase folder's. */
export function targetExpectations(to: number, file: string | undefined): Expectations {
  return file === undefined ? phaseExpectations(to) : readExpectations(file, '--expectations');
}

/**
 * `--analysis FILE` (read and checked now: exit 2 naming the field) or `--analysis default` (the target
 * phase's file now; the current phase's once it is known, still before any change).
 */
export function analysisOption(value: string | undefined, to: number): AnalysisChoice | undefined {
  if (value === undefined) return undefined;
  if (value === '') throw new UsageError('--analysis needs a file name, or default');
  if (value === 'default') {
    analysisInput(phaseAnalysisPath(to), `phase ${to} analysis`);
    return { kind: 'default' };
  }
  return { kind: 'file', path: value, analysis: analysisInput(value, '--analysis') };
}

/**
 * The Prometheus the analysis asks: `--prometheus URL`, else the environment file's `prometheusUrl`.
 * Needed with --analysis, and with --resume (whose bake asks it too); refused when it is no http(s) URL.
 */
export function prometheusOption(
  value: string | undefined,
  environment: Environment,
  analysis: AnalysisChoice | undefined,
  decision: 'resume' | 'abort' | undefined,
): string | undefined {
  if (value !== undefined && !/^https?:\/\/[^/\s]+/.test(value))
    throw new UsageError(`--prometheus must be an http(s) URL, not "${value}"`);
  const url = (value ?? environment.prometheusUrl)?.replace(/\/$/, '');
  if (url === undefined && (analysis !== undefined || decision === 'resume'))
    throw new UsageError(
      `--${analysis ? 'analysis' : 'resume'} needs a Prometheus: give --prometheus URL, or prometheusUrl in environments/${environment.name}.json`,
    );
  return url;
}

/** `--metrics-file FILE`: its folder must exist (checked before anything runs). */
export function metricsFileOption(file: string | undefined): string | undefined {
  if (file === undefined) return undefined;
  if (file === '') throw new UsageError('--metrics-file needs a file name');
  const folder = dirname(file);
  if (!existsSync(folder) || !statSync(folder).isDirectory())
    throw new UsageError(`--metrics-file ${file}: the folder ${folder} does not exist`);
  return file;
}
