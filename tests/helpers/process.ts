/** Running a command to its end, as every helper that starts a short-lived program does. */
import { spawn } from 'node:child_process';

export interface Finished {
  /** The exit code; null when a signal ended it. */
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Written to its standard input, which is then closed (otherwise it has none). */
  input?: string;
  /** SIGTERM after this long. */
  timeoutMs?: number;
}

/** Runs `command ARGS` to its end; never rejects on a non-zero exit (the caller judges `code`). */
export function runToEnd(command: string, args: string[], options: RunOptions = {}): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk;
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk;
    });
    if (child.stdin) {
      child.stdin.on('error', () => {}); // a command that exits without reading its input
      child.stdin.end(options.input);
    }
    const timer = options.timeoutMs ? setTimeout(() => child.kill('SIGTERM'), options.timeoutMs) : undefined;
    timer?.unref();
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}
