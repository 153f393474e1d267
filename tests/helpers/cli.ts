import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../broker/paths.js';
import { BrokerProcess } from '../../cli/cluster/broker-process.js';
import { ADMIN_TOKEN } from './broker.js';
import { freePort } from './ports.js';
import { type RunOptions, runToEnd } from './process.js';

/** The compiled `workbench` command, as installed by the package's `bin`. */
export const WORKBENCH = join(packageRoot(), 'dist', 'cli', 'main.js');

function requireBuild(): void {
  if (!existsSync(WORKBENCH)) throw new Error(`${WORKBENCH} is missing: run "npm run build" first`);
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `workbench ARGS` to completion: its output also to `logFile` as it comes, and SIGTERM after
 * `timeoutMs` (so a run its test gave up on does not outlive it), if given.
 */
export async function runWorkbench(
  args: string[],
  env: Record<string, string> = {},
  cwd?: string,
  options: Pick<RunOptions, 'logFile' | 'timeoutMs'> = {},
): Promise<CliResult> {
  requireBuild();
  const { code, stdout, stderr } = await runToEnd(process.execPath, [WORKBENCH, ...args], {
    env: { ...process.env, ...env },
    cwd,
    ...options,
  });
  return { code, stdout, stderr };
}

export interface NodeProcess {
  process: ChildProcess;
  nodeId: string;
  url: string;
  wsUrl: string;
  output(): string;
  /** Resolves with the exit code (or signal name) once the process is gone. */
  exited: Promise<number | string | null>;
}

/** `workbench broker` as its own process (compiled JavaScript), ready once /health answers 200. */
export async function spawnBrokerProcess(
  databaseUrl: string,
  env: Record<string, string> = {},
): Promise<NodeProcess> {
  requireBuild();
  const port = await freePort();
  const nodeId = env.NODE_ID ?? `proc-${port}`;
  const broker = BrokerProcess.spawn({
    port,
    env: {
      DATABASE_URL: databaseUrl,
      NODE_ID: nodeId,
      ADMIN_TOKEN,
      REDIS_KEY_PREFIX: `wbtest:${nodeId}:`,
      LOG_LEVEL: 'info',
      ...env,
    },
    output: 'pipe',
  });
  const { output, exited } = captured(broker.child);
  let gone = false;
  void exited.then(() => {
    gone = true;
  });
  try {
    await broker.waitHealthy(20_000, {
      intervalMs: 25,
      only200: true,
      // Found dead once all its output is read ('close'), so the error shows why it died.
      isDead: () => gone,
      deadError: () => new Error(`broker exited during start:\n${output()}`),
    });
  } catch (error) {
    broker.kill(); // never leave a half-started broker behind
    throw error;
  }
  return { process: broker.child, nodeId, url: broker.url, wsUrl: broker.wsUrl, output, exited };
}

/** A child process's stdout and stderr together, and its end (exit code or signal name), all output read. */
export function captured(child: ChildProcess): {
  output: () => string;
  exited: Promise<number | string | null>;
} {
  let output = '';
  child.stdout?.on('data', (chunk) => {
    output += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    output += chunk;
  });
  // 'close', not 'exit': 'exit' can come before the last of its output has been read from the pipes, and
  // what a test reads once the process ended must be all it printed.
  const exited = new Promise<number | string | null>((resolve) =>
    child.on('close', (code, signal) => resolve(code ?? signal)),
  );
  return { output: () => output, exited };
}
