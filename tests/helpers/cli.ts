import { workbenchMain } from '../../cli/cluster/broker-process.js';
import { type ProcessNode, requireBuild } from './nodes.js';
import { type RunOptions, runToEnd } from './process.js';

export { captured } from './nodes.js';

/** The compiled `workbench` command, as installed by the package's `bin`. */
export const WORKBENCH = workbenchMain();

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

/** A broker process of the one fixture (tests/helpers/nodes.ts `startNode({ kind: 'process' })`). */
export type NodeProcess = ProcessNode;
