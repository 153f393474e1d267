import { defineCommand, type OptionSpec, type Parsed, portOption, positiveInt, UsageError } from '../args.js';
import { down, startNode, stopNode, up } from '../cluster/local.js';
import { DEFAULT_DATABASE_URL, DEFAULT_REDIS_URL } from '../database.js';

/**
 * `workbench up [--phase N] [--nodes K] [--port P] [--lb haproxy|traefik]`: a local cluster of the phase,
 * with Traefik (when installed) or HAProxy in front.
 */
const UP_OPTIONS = {
  phase: { type: 'string', value: 'N', help: "the phase's topology and settings (0-4; default 3)" },
  env: { type: 'string', value: 'E', help: 'the environment name its nodes report (default: phaseN)' },
  'flags-phase': {
    type: 'string',
    value: 'N',
    help: "start on phase N's flag preset instead of the phase's own",
  },
  nodes: { type: 'string', value: 'K', help: "how many brokers (default: the phase's)" },
  port: { type: 'string', value: 'P', help: "the load balancer's port (0 picks a free one)" },
  lb: {
    type: 'string',
    value: 'haproxy|traefik',
    help: 'the load balancer (default: traefik when installed, else haproxy)',
  },
  'database-url': {
    type: 'string',
    value: 'URL',
    help: 'the database (default: DATABASE_URL, else the local default)',
  },
  'redis-url': {
    type: 'string',
    value: 'URL',
    help: 'the Redis (default: REDIS_URL, else the local default)',
  },
} as const satisfies OptionSpec;

export const upCommand = defineCommand({
  synopsis: ['up [--phase N] [--nodes K] [--port P] [--lb haproxy|traefik] [--env E] [--flags-phase N]'],
  about: `Starts a local cluster of phase N: brokers behind Traefik (when a traefik binary is on PATH) or HAProxy;
its state goes to .workbench/.`,
  options: UP_OPTIONS,
  run: runUpCommand,
});

async function runUpCommand({ values, positionals }: Parsed<typeof UP_OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const phase = values.phase === undefined ? 3 : Number(values.phase);
  if (!Number.isInteger(phase) || phase < 0 || phase > 4)
    throw new UsageError('--phase must be 0, 1, 2, 3 or 4');
  if (values.lb !== undefined && values.lb !== 'haproxy' && values.lb !== 'traefik')
    throw new UsageError('--lb must be haproxy or traefik');
  const cluster = await up({
    loadBalancer: values.lb,
    phase,
    nodes: values.nodes === undefined ? undefined : positiveInt('--nodes', values.nodes, 1),
    environment: values.env,
    flagsPhase: values['flags-phase'] === undefined ? undefined : Number(values['flags-phase']),
    port: portOption('--port', values.port),
    databaseUrl: values['database-url'] ?? process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL,
    redisUrl: values['redis-url'] ?? process.env.REDIS_URL ?? DEFAULT_REDIS_URL,
    log: (line) => console.log(line),
  });
  console.log(`\n  phase ${cluster.phase} cluster up
    load balancer   ${cluster.lb.url}   (${cluster.lb.kind}, log .workbench/logs/${cluster.lb.kind}.log; WebSocket: ${cluster.lb.url.replace('http', 'ws')}/ws)
${cluster.nodes.map((n) => `    ${n.id.padEnd(14)}  ${n.url}   (pid ${n.pid}, log .workbench/logs/${n.id}.log)`).join('\n')}
    admin token     in .workbench/cluster.json
    database        ${cluster.databaseUrl}
    state           .workbench/ (cluster.json, logs, flags/${cluster.flagsEnv}.json)
  "workbench down" stops it.`);
  return 0;
}

const DOWN_OPTIONS = {} as const satisfies OptionSpec;

export const downCommand = defineCommand({
  synopsis: ['down'],
  about: `Stops the local cluster started in this folder.`,
  options: DOWN_OPTIONS,
  run: runDownCommand,
});

async function runDownCommand({ positionals }: Parsed<typeof DOWN_OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const cluster = await down();
  console.log(
    cluster
      ? `stopped the phase ${cluster.phase} cluster (${cluster.nodes.length} nodes and the load balancer)`
      : 'no cluster is running here',
  );
  return 0;
}

/**
 * `workbench node kill|stop|start ID`: one node of the local cluster. `kill` is a crash (SIGKILL), `stop` a
 * drain (SIGTERM), `start` brings it back on its own port with its siblings' settings. The smoke checks of
 * node failures use these, and so can an operator rehearsing a failover.
 */
const NODE_OPTIONS = {} as const satisfies OptionSpec;

export const nodeCommand = defineCommand({
  synopsis: ['node kill|stop|start ID'],
  about: `One node of the local cluster: kill crashes it (SIGKILL), stop drains it (SIGTERM), start brings it back
on its own port and waits until it is healthy.`,
  options: NODE_OPTIONS,
  run: runNodeCommand,
});

async function runNodeCommand({ positionals }: Parsed<typeof NODE_OPTIONS>): Promise<number> {
  const [action, id, ...extra] = positionals;
  if (action !== 'kill' && action !== 'stop' && action !== 'start')
    throw new UsageError(`unknown node action "${action ?? ''}" (expected kill, stop or start)`);
  if (!id) throw new UsageError(`usage: workbench node ${action} NODE_ID`);
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  if (action === 'start') await startNode(process.cwd(), id);
  else await stopNode(process.cwd(), id, action === 'kill' ? 'SIGKILL' : 'SIGTERM');
  console.log(
    `${id}: ${action === 'start' ? 'started and healthy' : action === 'kill' ? 'killed' : 'drained and stopped'}`,
  );
  return 0;
}
