#!/usr/bin/env node
/**
 * The `workbench` command. It knows each command by name, summary and loader (cli/registry.ts): a
 * command's module (with its imports: pg, ioredis, fastify…) is imported only when that command runs or its
 * help is asked for, so `workbench --help` loads next to nothing and a flip loads only what flipping needs. Each module exports its options and help text together (cli/args.ts `defineCommand`);
 * main parses the options from that spec before the command sees them, so the help cannot drift from the
 * parser. Errors become messages and exit codes (1: the command failed, 2: it was called wrongly).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../broker/paths.js';
import { applySecretFiles, SECRET_VARIABLES } from '../broker/secrets/files.js';
import { scrub, secretValues } from '../broker/secrets/redact.js';
import { given, helpText, parse, UsageError, wantsHelp } from './args.js';
import { COMMANDS } from './registry.js';

const width = Math.max(...Object.keys(COMMANDS).map((name) => name.length)) + 2;
const USAGE = `usage: workbench <command> [options]

commands:
${Object.entries(COMMANDS)
  .map(([name, { summary }]) => `  ${name.padEnd(width)}${summary}`)
  .join('\n')}

  workbench <command> --help (or workbench help <command>): the command's options
  workbench --version: the version`;

function version(): string {
  return (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string })
    .version;
}

async function main(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === undefined) {
    console.error(USAGE);
    return 2;
  }
  if (first === '--help' || first === '-h') {
    console.log(USAGE);
    return 0;
  }
  if (first === '--version' || first === '-V') {
    console.log(version());
    return 0;
  }
  // `workbench help` and `workbench help CMD`: the same texts as `--help`.
  const helpOnly = first === 'help';
  const name = helpOnly ? rest[0] : first;
  if (helpOnly && name === undefined) {
    console.log(USAGE);
    return 0;
  }
  const entry = Object.hasOwn(COMMANDS, name!) ? COMMANDS[name!] : undefined;
  if (!entry) {
    console.error(`workbench: unknown command "${name}"\n\n${USAGE}`);
    return 2;
  }
  const command = await entry.load();
  if (helpOnly || wantsHelp(rest)) {
    console.log(helpText(name!, command));
    return 0;
  }
  const jsonErrors = command.jsonErrors === true && given(rest, '--json');
  const fail = (code: number, unscrubbed: string, usage: boolean) => {
    // Whatever failed (a driver's message, a config value), a secret the process holds is not printed.
    const message = scrub(unscrubbed, secretValues(process.env));
    if (jsonErrors) console.log(JSON.stringify({ error: message, exitCode: code }));
    else console.error(`workbench ${name}: ${message}${usage ? `\n\n${helpText(name!, command)}` : ''}`);
    return code;
  };
  try {
    await resolveSecretFiles();
    return (await command.run(parse(rest, command.options))) ?? 0;
  } catch (error) {
    if (error instanceof UsageError) return fail(2, error.message, true);
    // Loaded only on this path: nothing else in main needs the broker's configuration module.
    const { ConfigError } = await import('../broker/config.js');
    if (error instanceof ConfigError) return fail(2, `configuration error: ${error.message}`, false);
    return fail(1, (error as Error).message, false);
  }
}

/**
 * Every `X_FILE` of a secret variable read into `X` (broker/secrets/files.ts), once, for every command: the
 * broker, the CLI's own commands and every process they start inherit the values, not the paths.
 */
async function resolveSecretFiles(): Promise<void> {
  if (!SECRET_VARIABLES.some((name) => process.env[`${name}_FILE`])) return;
  const { ConfigError } = await import('../broker/config.js');
  applySecretFiles(process.env, (variable, message) => new ConfigError(variable, message));
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
