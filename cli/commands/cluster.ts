import { parse, portOption, positiveInt, UsageError } from '../args.js';
import { down, startNode, stopNode, up } from '../cluster/local.js';
import { DEFAULT_DATABASE_URL, DEFAULT_REDIS_URL } from '../database.js';

/**
 * `workbench up [--phase N] [--nodes K] [--port P] [--lb haproxy|traefik]`: a local cluster of the phase,
 * with Traefik (when installed) or HAProxy in front.
 */
export async function upCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    phase: { type: 'string' },
    env: { type: 'string' },
    'flags-phase': { type: 'string' },
    nodes: { type: 'string' },
    port: { type: 'string' },
    lb: { type: 'string' },
    'database-url': { type: 'string' },
    'redis-url': { type: 'string' },
  });
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

export async function downCommand(argv: string[]): Promise<number> {
  const { positionals } = parse(argv, {});
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
export async function nodeCommand(argv: string[]): Promise<number> {
  const { positionals } = parse(argv, {});
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
