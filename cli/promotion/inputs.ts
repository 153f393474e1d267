/**
 * A promotion's inputs, read and checked before anything changes (issue 27 item 1): the target phase, the
 * policy's environment name, and the expectations (a file's or a phase folder's). A bad one is a
 * UsageError naming the field (exit 2): the promotion stops before it opens the database, so a missing
 * file never costs a smoke run and a flip.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { packageRoot } from '../../broker/paths.js';
import { UsageError } from '../args.js';
import { ENVIRONMENT_NAME } from '../environments/environment.js';
import { CHECK_NAMES, type Expectations } from '../smoke/run.js';

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
