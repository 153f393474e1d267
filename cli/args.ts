import { parseArgs } from 'node:util';

/** A mistake in how a command was called: printed with the command's usage, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

type OptionSpec = Record<string, { type: 'string' | 'boolean'; short?: string }>;

/** Strict parsing: an unknown option or a missing value is a UsageError, never silently ignored. */
export function parse<O extends OptionSpec>(argv: string[], options: O) {
  try {
    return parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

export function positiveInt(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value) || Number(value) < 1)
    throw new UsageError(`${name} must be a positive whole number`);
  return Number(value);
}
