import { parseArgs } from 'node:util';

/** A mistake in how a command was called: printed with the command's usage, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/**
 * One option of a command: how it parses and how its help describes it. `value` names its argument in the
 * help (`--phase N`); `help` says what it does. The parser and the help read the same object, so the usage
 * cannot list an option the parser refuses, nor leave out one it takes.
 */
export interface OptionHelp {
  type: 'string' | 'boolean';
  short?: string;
  value?: string;
  help: string;
}

export type OptionSpec = Record<string, OptionHelp>;

/** A command as main.ts runs it: its options (parsed before `run` sees them) and its help. */
export interface Command<O extends OptionSpec = OptionSpec> {
  /** How it is called, one line per form (`flags set KEY on|off --env E`), without the `workbench `. */
  synopsis: string[];
  /** What it does and how it ends (exit codes), a few lines. */
  about: string;
  options: O;
  /**
   * With `--json`, its errors too are JSON on stdout (`{"error": "…"}`, same exit codes), so a script
   * reading its output always reads JSON.
   */
  jsonErrors?: boolean;
  run(parsed: Parsed<O>): Promise<number | undefined>;
}

export type Parsed<O extends OptionSpec> = ReturnType<
  typeof parseArgs<{ args: string[]; options: O; allowPositionals: true; strict: true }>
>;

/** Types a command's `run` against its own options (one source of truth for both). */
export function defineCommand<O extends OptionSpec>(command: Command<O>): Command<O> {
  return command;
}

/** Strict parsing: an unknown option or a missing value is a UsageError, never silently ignored. */
export function parse<O extends OptionSpec>(argv: string[], options: O): Parsed<O> {
  try {
    return parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

/** Whether one of `names` is among the arguments before a `--` (after it, arguments are values). */
export function given(argv: string[], ...names: string[]): boolean {
  const end = argv.indexOf('--');
  return (end === -1 ? argv : argv.slice(0, end)).some((arg) => names.includes(arg));
}

/** `--help` or `-h` among the arguments: the command's help instead of running it. */
export function wantsHelp(argv: string[]): boolean {
  return given(argv, '--help', '-h');
}

/** A command's help: its forms, what it does, and every option it takes (from the parser's own spec). */
export function helpText(name: string, command: Command): string {
  const forms = command.synopsis.map((form, i) => `${i === 0 ? 'usage: ' : '       '}workbench ${form}`);
  const entries = Object.entries(command.options).map(([option, spec]) => {
    const short = spec.short ? `-${spec.short}, ` : '';
    return [`${short}--${option}${spec.value ? ` ${spec.value}` : ''}`, spec.help] as const;
  });
  entries.push(['-h, --help', `this help (also: workbench help ${name})`]);
  const width = Math.max(...entries.map(([left]) => left.length)) + 2;
  const lines = entries.map(([left, help]) => `  ${left.padEnd(width)}${help}`);
  return `${forms.join('\n')}\n\n${command.about}\n\noptions:\n${lines.join('\n')}`;
}

export function positiveInt(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value) || Number(value) < 1)
    throw new UsageError(`${name} must be a positive whole number`);
  return Number(value);
}

/** A whole number from `min` to `max` (a count, a seed): anything else is a UsageError naming the option. */
export function wholeNumber(name: string, value: string, min: number, max: number): number {
  if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max)
    throw new UsageError(`${name} must be a whole number from ${min} to ${max}, not "${value}"`);
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
