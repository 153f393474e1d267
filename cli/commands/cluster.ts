import { redactUrl } from '../../broker/secrets/redact.js';
import { defineCommand, type OptionSpec, type Parsed, portOption, positiveInt, UsageError } from '../args.js';
import { type ClusterFile, down, startNode, stopNode, up } from '../cluster/local.js';
import { reapRegions } from '../cluster/regions/simulation.js';
import { launchSupervisor, runSupervisor, tellLauncher } from '../cluster/regions/supervisor.js';
import { parseRegionOptions } from '../cluster/regions/topology.js';
import { DEFAULT_DATABASE_URL } from '../database.js';
import { environmentNameOption, phaseOption } from '../promotion/inputs.js';

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
    help: "an operator's own Redis (default: REDIS_URL, else a private one with an ACL user)",
  },
  'rtt-ms': {
    type: 'string',
    value: 'MS',
    help: 'phase 4: the round trip between the regions, half each way (default 40)',
  },
  'jitter-ms': {
    type: 'string',
    value: 'MS',
    help: 'phase 4: extra one-way delay drawn per chunk, at most half the RTT (default 2)',
  },
  'nodes-per-region': {
    type: 'string',
    value: 'K',
    help: 'phase 4: brokers in each region (default 2)',
  },
  sync: {
    type: 'boolean',
    help: "phase 4: Patroni's synchronous mode (a commit waits for the other region: zero acknowledged loss)",
  },
  foreground: {
    type: 'boolean',
    help: 'phase 4: run the simulation in this terminal (Ctrl-C stops everything)',
  },
} as const satisfies OptionSpec;

/** Options that only phase 4's two-region simulation takes, and the ones it refuses. */
const REGION_ONLY = ['rtt-ms', 'jitter-ms', 'nodes-per-region', 'sync', 'foreground'] as const;
const NOT_IN_REGIONS = {
  nodes: '--nodes-per-region',
  'database-url': 'nothing: phase 4 runs its own throw-away Postgres primary and replica',
  'redis-url': 'nothing: phase 4 runs a throw-away Redis per region',
  lb: 'nothing: phase 4 runs HAProxy per region and for the entry',
} as const;

export const upCommand = defineCommand({
  synopsis: [
    'up [--phase N] [--nodes K] [--port P] [--lb haproxy|traefik] [--env E] [--flags-phase N]',
    'up --phase 4 [--rtt-ms MS] [--jitter-ms MS] [--nodes-per-region K] [--sync] [--port P] [--foreground]',
  ],
  about: `Starts a local cluster of phase N: brokers behind Traefik (when a traefik binary is on PATH) or HAProxy;
its state goes to .workbench/. Phase 4 is two simulated regions (docs/multi-region.md): a Patroni per region running
its Postgres (elected through a throw-away etcd: the leader in a, a streaming replica in b; --sync for
synchronous mode), a Redis, brokers and HAProxy per region and the weighted entry, every cross-region link
delayed; "workbench region" cuts, restores, kills the primary and switches over.`,
  options: UP_OPTIONS,
  run: runUpCommand,
});

async function runUpCommand({ values, positionals }: Parsed<typeof UP_OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const phase = values.phase === undefined ? 3 : phaseOption('--phase', values.phase);
  if (values.lb !== undefined && values.lb !== 'haproxy' && values.lb !== 'traefik')
    throw new UsageError('--lb must be haproxy or traefik');
  // Checked before anything starts: a bad one exits 2 naming it.
  const flagsPhase =
    values['flags-phase'] === undefined ? undefined : phaseOption('--flags-phase', values['flags-phase']);
  environmentNameOption('--env', values.env);
  if (phase === 4) return runRegionsUp(values);
  for (const option of REGION_ONLY)
    if (values[option] !== undefined)
      throw new UsageError(`--${option} is for phase 4's two-region simulation only (--phase 4)`);
  const cluster = await up({
    loadBalancer: values.lb,
    phase,
    nodes: values.nodes === undefined ? undefined : positiveInt('--nodes', values.nodes, 1),
    environment: values.env,
    flagsPhase,
    port: portOption('--port', values.port),
    databaseUrl: values['database-url'] ?? process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL,
    // A REDIS_URL in the environment names a Redis as --redis-url does (every other command reads it
    // first too, so they would push elsewhere than the brokers listen otherwise); neither: a private one.
    redisUrl: values['redis-url'] ?? (process.env.REDIS_URL || undefined),
    log: (line) => console.log(line),
  });
  console.log(`\n  phase ${cluster.phase} cluster up
    load balancer   ${cluster.lb.url}   (${cluster.lb.kind}, log .workbench/logs/${cluster.lb.kind}.log; WebSocket: ${cluster.lb.url.replace('http', 'ws')}/ws)
${cluster.nodes.map((n) => `    ${n.id.padEnd(14)}  ${n.url}   (pid ${n.pid}, log .workbench/logs/${n.id}.log)`).join('\n')}
    admin token     in .workbench/cluster.json
    database        ${redactUrl(cluster.databaseUrl)}
    redis           ${redactUrl(cluster.redisUrl)}${cluster.redisServer ? `   (its own, pid ${cluster.redisServer.pid}, ACL user; log .workbench/logs/redis.log)` : ''}
    state           .workbench/ (cluster.json, logs, flags/${cluster.flagsEnv}.json)
  "workbench down" stops it.`);
  return 0;
}

/**
 * Phase 4: every option checked before anything starts, then the simulation started in the background
 * (or, with --foreground, run here until Ctrl-C).
 */
async function runRegionsUp(values: Parsed<typeof UP_OPTIONS>['values']): Promise<number> {
  for (const [option, instead] of Object.entries(NOT_IN_REGIONS))
    if (values[option as keyof typeof NOT_IN_REGIONS] !== undefined)
      throw new UsageError(`--${option} does not apply to phase 4 (use ${instead})`);
  const regionOptions = parseRegionOptions({
    rttMs: values['rtt-ms'],
    jitterMs: values['jitter-ms'],
    nodesPerRegion: values['nodes-per-region'],
    sync: values.sync,
  });
  const flagsPhase = values['flags-phase'] === undefined ? undefined : Number(values['flags-phase']);
  const port = portOption('--port', values.port);
  const cwd = process.cwd();
  if (!values.foreground) {
    const args = [
      '--phase',
      '4',
      '--rtt-ms',
      String(regionOptions.rttMs),
      '--jitter-ms',
      String(regionOptions.jitterMs),
      '--nodes-per-region',
      String(regionOptions.nodesPerRegion),
      ...(regionOptions.sync ? ['--sync'] : []),
      ...(port === undefined ? [] : ['--port', String(port)]),
      ...(values.env === undefined ? [] : ['--env', values.env]),
      ...(flagsPhase === undefined ? [] : ['--flags-phase', String(flagsPhase)]),
    ];
    printRegions(await launchSupervisor(cwd, args), false);
    return 0;
  }
  try {
    await runSupervisor(
      {
        ...regionOptions,
        cwd,
        port,
        environment: values.env,
        flagsPhase,
        log: (line) => console.log(line),
      },
      (cluster) => {
        printRegions(cluster, true);
        tellLauncher({ ready: cluster });
      },
    );
  } catch (error) {
    tellLauncher({ error: (error as Error).message });
    throw error;
  }
  return 0;
}

function printRegions(cluster: ClusterFile, foreground: boolean): void {
  const regions = cluster.regions!;
  const lines = [
    `\n  phase 4: ${regions.list.length} regions up, ${regions.rttMs} ms RTT between them (jitter ${regions.jitterMs} ms one-way)`,
    `    entry           ${cluster.lb.url}   (weighted, health-checked; log .workbench/logs/haproxy-entry.log)`,
  ];
  for (const region of regions.list) {
    lines.push(
      `    region ${region.name}        load balancer ${region.lb.url}, Redis ${redactUrl(region.redis.url)}, Postgres ${region.postgres.role} ${redactUrl(region.postgres.url)}`,
    );
    for (const node of cluster.nodes.filter((n) => n.region === region.name))
      lines.push(
        `      ${node.id.padEnd(14)}${node.url}   (pid ${node.pid}, log .workbench/logs/${node.id}.log)`,
      );
  }
  lines.push(
    `    links           ${regions.links.map((l) => `${l.from}→${l.to} ${l.service}`).join(', ')}`,
    `    supervisor      pid ${regions.supervisor.pid}${foreground ? ' (this process: Ctrl-C stops everything)' : ', log .workbench/logs/regions.log'}`,
    '  "workbench region cut|restore|promote|kill-primary" acts on it; "workbench down" stops it.',
  );
  console.log(lines.join('\n'));
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
  // A supervisor that was killed could not remove its servers: whatever it left goes now.
  if (cluster?.regions) await reapRegions(cluster.regions);
  console.log(
    cluster
      ? `stopped the phase ${cluster.phase} cluster (${cluster.nodes.length} nodes and the load balancer${cluster.regions ? `s, ${cluster.regions.list.length} regions` : ''})`
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
