/** Processes of a test: running a command to its end, and telling what still runs or listens afterwards. */
import { spawn } from 'node:child_process';
import { createWriteStream, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { dirname } from 'node:path';
import { waitForOrGiveUp } from './wait.js';

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
  /** SIGTERM after this long (SIGKILL 5 s later if it is still there). */
  timeoutMs?: number;
  /**
   * Also written here as it comes (stdout and stderr together), so that a run a test gave up on (its
   * timeout) still shows how far it got.
   */
  logFile?: string;
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
    if (options.logFile) mkdirSync(dirname(options.logFile), { recursive: true });
    const log = options.logFile ? createWriteStream(options.logFile) : undefined;
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk;
      log?.write(chunk);
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk;
      log?.write(chunk);
    });
    if (child.stdin) {
      child.stdin.on('error', () => {}); // a command that exits without reading its input
      child.stdin.end(options.input);
    }
    // SIGTERM, then SIGKILL: a process whose main thread is stuck never runs its SIGTERM handler.
    let killer: NodeJS.Timeout | undefined;
    const timer = options.timeoutMs
      ? setTimeout(() => {
          child.kill('SIGTERM');
          killer = setTimeout(() => child.kill('SIGKILL'), 5000);
        }, options.timeoutMs)
      : undefined;
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      clearTimeout(killer);
      log?.end();
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** Whether `pid` runs (a zombie waiting for its reaper does not). */
export function running(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** Whether `pid` is stopped by a signal (SIGSTOP: state T in /proc), as a stalled server is. */
export function stopped(pid: number): boolean {
  try {
    return /^\d+ \(.*\) T/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** The pids of `pids` still running after a few seconds (a killed child is reaped once its parent is gone). */
export async function stillRunning(pids: number[], waitMs = 5000): Promise<number[]> {
  await waitForOrGiveUp(() => !pids.some(running), { timeoutMs: waitMs, intervalMs: 100 });
  return pids.filter(running);
}

/** Every process running now whose command line mentions `text` (a folder only one run uses, say). */
export function processesMentioning(text: string): Array<{ pid: number; command: string }> {
  const found = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const command = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
      if (command.includes(text) && running(Number(entry))) found.push({ pid: Number(entry), command });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Whether something accepts TCP connections on 127.0.0.1:`port`. */
export function listening(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const socket = createConnection(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** The processes `pid` started that still run, and theirs, and so on (read from /proc's parent links). */
export function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // The parent is the 4th field, after "(name)", which may itself hold spaces or parentheses.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const found: number[] = [];
  const visit = (of: number) => {
    for (const child of children.get(of) ?? []) {
      found.push(child);
      visit(child);
    }
  };
  visit(pid);
  return found;
}
