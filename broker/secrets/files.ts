/**
 * Secrets from files (`X_FILE`): every variable that holds a secret may instead name a file that holds it,
 * as container secrets (/run/secrets/…) and systemd credentials are handed over, so the secret is in no
 * environment listing and no command line. Resolved once, before the configuration is read
 * (broker/config.ts) and, for the CLI's own commands, when `workbench` starts (cli/main.ts).
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

type Env = Record<string, string | undefined>;

/**
 * The variables that hold a secret: a token, a key, or a URL that may carry a password. The same list
 * names what the log scrubber hides (secrets/redact.ts).
 */
export const SECRET_VARIABLES = [
  'ADMIN_TOKEN',
  'ADMIN_TOKEN_PREVIOUS',
  'BUS_SECRET',
  'BUS_SECRET_PREVIOUS',
  'DATABASE_URL',
  'DATABASE_READ_URL',
  'REDIS_URL',
  'REDIS_REMOTE_URLS',
  'REDIS_COUNTERS_URL',
  'REDIS_CLUSTER_PASSWORD',
  'UNLEASH_API_TOKEN',
  'UNLEASH_ADMIN_TOKEN',
] as const;

/** A secret file larger than this is refused (a wrong path, e.g. a log, rather than a secret). */
export const MAX_SECRET_FILE_BYTES = 64 * 1024;

type Fail = (variable: string, message: string) => Error;

/**
 * `env` with every `X_FILE` replaced by `X` (the file's content, one trailing newline trimmed). Both set,
 * an unreadable, empty or oversized file: an error naming the variable and the path, never the content.
 */
export function withSecretFiles(env: Env, fail: Fail): Env {
  const resolved: Env = { ...env };
  applySecretFiles(resolved, fail);
  return resolved;
}

/** The same, in place (the CLI's process.env, so the processes it starts inherit the resolved values). */
export function applySecretFiles(env: Env, fail: Fail): void {
  for (const name of SECRET_VARIABLES) {
    const fileVariable = `${name}_FILE`;
    const path = env[fileVariable];
    if (path === undefined || path === '') continue;
    if (env[name] !== undefined && env[name] !== '')
      throw fail(fileVariable, `and ${name} are both set; set only one of them`);
    env[name] = readConfigFile(path, fileVariable, fail, MAX_SECRET_FILE_BYTES);
    delete env[fileVariable];
  }
}

/**
 * The content of a small file a variable names (a secret, a CA certificate), one trailing newline
 * trimmed; an error naming the variable and the path (never the content) when it cannot be used.
 */
export function readConfigFile(path: string, variable: string, fail: Fail, maxBytes: number): string {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (error) {
    throw fail(variable, `cannot read ${path} (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw fail(variable, `${path} is not a regular file`);
    if (stat.size > maxBytes)
      throw fail(variable, `${path} is larger than ${maxBytes} bytes; is it the right file?`);
    const buffer = Buffer.alloc(stat.size);
    const length = stat.size === 0 ? 0 : readSync(fd, buffer, 0, stat.size, 0);
    const content = buffer
      .subarray(0, length)
      .toString('utf8')
      .replace(/\r?\n$/, '');
    if (content === '') throw fail(variable, `${path} is empty`);
    return content;
  } finally {
    closeSync(fd);
  }
}
