/**
 * The one way the workbench and its tests start a broker as a process: the compiled `workbench broker`
 * (dist/cli/main.js, run `npm run build` first) on this very Node.js binary (`process.execPath`, so a run
 * on Node 24 starts its brokers on 24 too), configured by its environment. What differs between callers is
 * options: a log file (`workbench up`: `.workbench/logs/<id>.log`) or pipes (the tests read the output),
 * and detached (its own process group, outliving the command that started it) or not.
 * `spawnWorkbench` is the same start for the other long-running workbench process (phase 4's supervisor).
 */
import { type ChildProcess, type StdioOptions, spawn } from 'node:child_process';
import { closeSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../broker/paths.js';
import { type WaitHealthyOptions, waitHealthy } from './health.js';

/** The compiled `workbench` command, as the package's `bin` installs it. */
export const workbenchMain = (): string => join(packageRoot(), 'dist', 'cli', 'main.js');

export interface WorkbenchSpawnOptions {
  /** The whole environment of the process (default: this process's). */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /**
   * Where stdout and stderr go: `'pipe'` (read them from the child), or a file descriptor opened for
   * appending (both to it; closed here once the child has its own copy, else one would leak per start).
   */
  output: 'pipe' | number;
  /** Its own process group (a Ctrl-C of the terminal does not reach it), to outlive this process. */
  detached?: boolean;
  /** An IPC channel as fd 3 (`process.send` in the child). */
  ipc?: boolean;
}

/** `workbench ARGS` as a child process (compiled JavaScript, this Node.js binary). */
export function spawnWorkbench(args: string[], options: WorkbenchSpawnOptions): ChildProcess {
  const { output } = options;
  const stdio: StdioOptions = ['ignore', output, output, ...(options.ipc ? (['ipc'] as const) : [])];
  try {
    return spawn(process.execPath, [workbenchMain(), ...args], {
      cwd: options.cwd,
      env: options.env ?? process.env,
      detached: options.detached ?? false,
      stdio,
    });
  } finally {
    if (typeof output === 'number') closeSync(output);
  }
}

export interface BrokerSpawnOptions {
  /** The port it listens on, on 127.0.0.1 (its `PORT`). */
  port: number;
  /** Its settings (README § Configuration of a broker node) over this process's environment. */
  env: Record<string, string>;
  cwd?: string;
  output: WorkbenchSpawnOptions['output'];
  /** Detached and unref'd: this process may exit while the broker runs on (`workbench up`). */
  detached?: boolean;
}

/** One broker process: its pid and URL, waiting until it is healthy, stopping and killing it. */
export class BrokerProcess {
  readonly url: string;
  readonly wsUrl: string;

  private constructor(
    readonly child: ChildProcess,
    port: number,
  ) {
    this.url = `http://127.0.0.1:${port}`;
    this.wsUrl = `ws://127.0.0.1:${port}/ws`;
  }

  /** Starts `workbench broker`; `waitHealthy` says when it serves. */
  static spawn(options: BrokerSpawnOptions): BrokerProcess {
    const child = spawnWorkbench(['broker'], {
      // PORT last: the process listens where its `url` says.
      env: { ...process.env, ...options.env, PORT: String(options.port) },
      cwd: options.cwd,
      output: options.output,
      detached: options.detached,
    });
    if (options.detached) child.unref();
    return new BrokerProcess(child, options.port);
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** The process has exited (by itself or by a signal). */
  get exited(): boolean {
    return this.child.exitCode !== null || this.child.signalCode !== null;
  }

  /**
   * Resolves once `/health` answers; rejects when the process exits first (`isDead`: a caller's own sign of
   * that) or `timeoutMs` passes (it is then left running: the caller decides, usually `kill()`).
   */
  waitHealthy(
    timeoutMs: number,
    options: WaitHealthyOptions & { isDead?: () => boolean } = {},
  ): Promise<void> {
    return waitHealthy(this.url, timeoutMs, options.isDead ?? (() => this.exited), options);
  }

  /** SIGKILL (a crash: no drain), unless it has exited already. */
  kill(): void {
    if (!this.exited) this.child.kill('SIGKILL');
  }

  /** SIGTERM (a drain), then SIGKILL if it still runs after `graceMs`; resolves once it has exited. */
  async stop(graceMs = 12_000): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const graceOver = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), graceMs);
    });
    if ((await Promise.race([gone, graceOver])) === 'late') this.kill();
    clearTimeout(timer);
    await gone;
  }
}
