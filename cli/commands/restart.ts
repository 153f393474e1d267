/**
 * `workbench restart --rolling [--env E] [--json]`: every node of the local cluster (or of environment E,
 * through its file's node control commands) restarted in turn, each drained, its sessions waited for on
 * the others and its health waited for before the next (cli/cluster/rolling-restart.ts). Exit 0 when every
 * node was restarted, 1 when one did not come back or its sessions did not resume in time (named), 2 for a
 * bad call (no --rolling, a single node, an environment without control commands).
 */
import { defineCommand, durationOption, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { checkAllHealthy, nodeLine, rollingRestart } from '../cluster/rolling-restart.js';
import { NODE_TIMEOUT_MS, resolveEnvironment } from '../environments/environment.js';

const OPTIONS = {
  rolling: { type: 'boolean', help: 'one node at a time (the only mode there is: required)' },
  env: { type: 'string', value: 'E', help: 'the environment (default: the local cluster)' },
  'resume-timeout': {
    type: 'string',
    value: 'DURATION',
    help: "how long a drained node's sessions may take to resume on the others (default 30s)",
  },
  'health-timeout': {
    type: 'string',
    value: 'DURATION',
    help: 'how long a restarted node may take to answer /health 200 (default 60s)',
  },
  json: {
    type: 'boolean',
    help: 'JSON lines: {type:"node", …} per node, then {type:"summary", ok, totalMs}',
  },
} as const satisfies OptionSpec;

export const restartCommand = defineCommand({
  synopsis: ['restart --rolling [--env E] [--resume-timeout D] [--health-timeout D] [--json]'],
  about: `Restarts every node in turn: drains it (SIGTERM; its peers reconnect elsewhere), waits until its sessions
have resumed on the other nodes (Postgres presence; the nodes' connection gauges without ha.presence), starts it,
waits for /health 200, then the next. One line per node with its times. Exit 1 names the node that did not come
back or whose sessions did not resume in time (the nodes after it are not touched).`,
  options: OPTIONS,
  jsonErrors: true,
  run: runRestartCommand,
});

/** No cluster here or an environment that cannot be read is a bad call (exit 2), as a bad name is. */
function environmentOf(env: string | undefined): ReturnType<typeof resolveEnvironment> {
  try {
    return resolveEnvironment(env);
  } catch (error) {
    if (error instanceof UsageError) throw error;
    throw new UsageError((error as Error).message);
  }
}

async function runRestartCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (!values.rolling) throw new UsageError('only a rolling restart is offered: pass --rolling');
  const resumeTimeoutMs = durationOption('--resume-timeout', values['resume-timeout'], 30_000);
  const healthTimeoutMs = durationOption('--health-timeout', values['health-timeout'], 60_000);
  const { name, target } = environmentOf(values.env);
  if (!target.control)
    throw new UsageError(
      `environment "${name}" has no node control commands (its file's "control": kill, stop, start), so its nodes cannot be restarted`,
    );
  if (target.nodes.length < 2)
    throw new UsageError(
      `environment "${name}" has one node: its sessions would have nowhere to resume (a rolling restart needs two or more)`,
    );
  const unhealthy = await checkAllHealthy(target, NODE_TIMEOUT_MS);
  if (unhealthy) throw new Error(unhealthy);
  const print = (line: object | string) =>
    console.log(typeof line === 'string' ? line : JSON.stringify(line));
  if (!values.json) print(`rolling restart of ${name}: ${target.nodes.map((n) => n.id).join(', ')}`);
  const result = await rollingRestart({
    target,
    control: target.control,
    resumeTimeoutMs,
    healthTimeoutMs,
    onNode: (node) => print(values.json ? { type: 'node', ...node } : nodeLine(node)),
  });
  const untouched = target.nodes.slice(result.nodes.length).map((n) => n.id);
  if (values.json)
    print({ type: 'summary', ok: result.ok, totalMs: result.totalMs, notRestarted: untouched });
  else
    print(
      result.ok
        ? `every node restarted in ${(result.totalMs / 1000).toFixed(1)} s`
        : `stopped: ${result.nodes.at(-1)!.node} failed${untouched.length > 0 ? `; not restarted: ${untouched.join(', ')}` : ''}`,
    );
  return result.ok ? 0 : 1;
}
