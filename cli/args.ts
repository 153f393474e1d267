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

/** A TCP port option (0 picks a free one); `fallback` when it is not given. */
export function portOption(name: string, value: string | undefined, fallback: number): number;
export function portOption(name: string, value: string | undefined): number | undefined;
export function portOption(name: string, value: string | undefined, fallback?: number): number | undefined {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value) || Number(value) > 65535)
    throw new UsageError(`${name} must be a port number (0-65535; 0 picks a free one)`);
  return Number(value);
}

/** A duration option: `500ms`, `30s`, `2m`, `1h` or plain seconds; more than 0 and at most a day. */
export function durationOption(name: string, value: string | undefined, fallbackMs: number): number {
  if (value === undefined) return fallbackMs;
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(value);
  if (!match) throw new UsageError(`${name} must be a duration such as 500ms, 30s, 2m or 1h`);
  const ms = Number(match[1]) * { ms: 1, s: 1000, m: 60_000, h: 3600_000 }[match[2] ?? 's']!;
  if (ms <= 0 || ms > 24 * 3600_000) throw new UsageError(`${name} must be more than 0 and at most 24h`);
  return ms;
}
