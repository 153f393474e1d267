/**
 * An environment: the cluster a release manager smoke-tests, promotes and rolls back. The local cluster
 * (`.workbench/cluster.json`) is one; a remote one is described by `environments/<name>.json` in the
 * working directory. Both give the same things: where peers connect (the load balancer and each node),
 * the database the audit verifier reads, the admin token, how to change the environment's flags and, when
 * the environment allows it, how to crash, drain and restart a node (the node-failure checks need it).
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import { parseRedisClusterNodes, type RedisClusterNode } from '../../broker/redis/cluster-nodes.js';
import { type FlagsAccess, fileFlagsAccess, unleashFlagsAccess } from '../../flags/access.js';
import { UsageError } from '../args.js';
import { readCluster, startNode, stopNode } from '../cluster/local.js';
import { localClusterRedis } from '../cluster/redis-target.js';
import type { NodeControl, SmokeTarget } from '../smoke/context.js';

export interface Environment {
  name: string;
  /** The phase it runs when no promotion has been recorded yet. */
  phase: number;
  target: SmokeTarget;
  flags: FlagsAccess;
  /**
   * Where "refresh your flags now" is published; without it the nodes' own poll picks changes up. With
   * `clusterNodes` (a Redis Cluster's seed nodes) the push goes on the cluster's sharded channel, where the
   * nodes listen there, and `redisUrl` is not used (as REDIS_CLUSTER_NODES wins over REDIS_URL).
   */
  push?: { redisUrl: string; keyPrefix: string; clusterNodes?: RedisClusterNode[] | undefined };
  /** Must have passed a phase in this other environment before being promoted to it (staging before prod). */
  requirePassedIn?: string;
  /** The Prometheus that scrapes this environment: what `promote --analysis` asks. */
  prometheusUrl?: string;
}

/** How long a CLI command waits for one node to answer before calling it down (a remote node may hang). */
export const NODE_TIMEOUT_MS = 5000;

export const ENVIRONMENT_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const NODE_ID = /^[A-Za-z0-9_.-]{1,64}$/;
const httpUrl = z.url({ protocol: /^https?$/ });

/** A Redis Cluster's seed nodes, written as REDIS_CLUSTER_NODES is (`host:port,…`): same parser, same errors. */
const redisClusterNodes = z.string().transform((text, context) => {
  try {
    return parseRedisClusterNodes(text);
  } catch (error) {
    context.addIssue({ code: 'custom', message: (error as Error).message });
    return z.NEVER;
  }
});

/** A secret is never written in the file: it names the variable that holds it. */
const secret = z.string().regex(/^[A-Z_][A-Z0-9_]*$/, 'must name an environment variable');

export const EnvironmentFileSchema = z.strictObject({
  description: z.string().optional(),
  phase: z.number().int().min(0).max(4),
  lbUrl: httpUrl,
  nodes: z.array(z.strictObject({ id: z.string().regex(NODE_ID), url: httpUrl })).min(1),
  databaseUrlEnv: secret,
  adminTokenEnv: secret,
  flags: z.discriminatedUnion('provider', [
    z.strictObject({ provider: z.literal('file'), dir: z.string().min(1) }),
    z.strictObject({
      provider: z.literal('unleash'),
      url: httpUrl,
      tokenEnv: secret.optional(),
      unleashEnvironment: z.string().min(1),
    }),
  ]),
  /**
   * Where "refresh now" is pushed: `redisUrl`, or `redisUrlEnv`, the variable holding it when the URL
   * carries the Redis user's password (the compose stack's).
   */
  push: z
    .strictObject({
      redisUrl: z.string().startsWith('redis').optional(),
      redisUrlEnv: secret.optional(),
      keyPrefix: z.string(),
      clusterNodes: redisClusterNodes.optional(),
    })
    .refine((push) => (push.redisUrl === undefined) !== (push.redisUrlEnv === undefined), {
      message: 'give one of redisUrl and redisUrlEnv',
    })
    .optional(),
  /** Shell commands; `{node}` is replaced by the node's id. Leave out to skip the node-failure checks. */
  control: z
    .strictObject({ kill: z.string().min(1), stop: z.string().min(1), start: z.string().min(1) })
    .optional(),
  /** An address of the machine running the smoke checks that the nodes can fetch (for the watch check). */
  watchTargetHost: z.string().min(1).optional(),
  requirePassedIn: z.string().regex(ENVIRONMENT_NAME).optional(),
  /** The Prometheus scraping this environment's nodes, for `promote --analysis`. */
  prometheusUrl: httpUrl.optional(),
});

export type EnvironmentFile = z.infer<typeof EnvironmentFileSchema>;

function fromEnv(variable: string, what: string): string {
  const value = process.env[variable];
  if (!value) throw new Error(`${what}: the environment variable ${variable} is not set`);
  return value;
}

/** How long a control command (kill, stop, start) may take. */
const CONTROL_TIMEOUT_MS = 60_000;

/** Runs an environment's control command for a node; resolves when it exits 0. */
function shellControl(commands: NonNullable<EnvironmentFile['control']>, cwd: string): NodeControl {
  const run = (template: string, node: string) =>
    new Promise<void>((done, fail) => {
      if (!NODE_ID.test(node) || node.startsWith('-')) return fail(new Error(`bad node id "${node}"`));
      // Its own process group, so a timeout kills what the shell started too (an ssh, say).
      const child = spawn('sh', ['-c', template.replaceAll('{node}', node)], {
        cwd,
        detached: true,
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (chunk) => {
        stderr = (stderr + chunk).slice(-500);
      });
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          // already gone
        }
      }, CONTROL_TIMEOUT_MS);
      child.on('error', fail);
      child.on('exit', (code) => {
        clearTimeout(timer);
        if (code === 0) return done();
        const why = timedOut ? `timed out after ${CONTROL_TIMEOUT_MS / 1000} s` : `exited with ${code}`;
        fail(new Error(`"${template}" for ${node} ${why}${stderr.trim() ? `: ${stderr.trim()}` : ''}`));
      });
    });
  return {
    kill: (node) => run(commands.kill, node),
    stop: (node) => run(commands.stop, node),
    start: (node) => run(commands.start, node),
  };
}

/** Reads and checks an environment file; every problem is named with its field. */
function readEnvironmentFile(path: string): EnvironmentFile {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new UsageError(`${path}: not valid JSON (${(error as Error).message})`);
  }
  const parsed = EnvironmentFileSchema.safeParse(raw);
  if (!parsed.success) {
    const problems = parsed.error.issues.map(
      (issue) => `${issue.path.join('.') || '(file)'}: ${issue.message}`,
    );
    throw new UsageError(`${path}: ${problems.join('; ')}`);
  }
  return parsed.data;
}

/** Reads and checks `environments/<name>.json`, with the secrets it names from the environment. */
export function loadEnvironmentFile(path: string, name: string): Environment {
  const file = readEnvironmentFile(path);
  const base = dirname(path);
  const flags =
    file.flags.provider === 'file'
      ? fileFlagsAccess(resolve(base, file.flags.dir), name)
      : unleashFlagsAccess({
          url: file.flags.url,
          token: file.flags.tokenEnv ? fromEnv(file.flags.tokenEnv, 'flags.tokenEnv') : undefined,
          environment: file.flags.unleashEnvironment,
        });
  return {
    name,
    phase: file.phase,
    target: {
      lbUrl: file.lbUrl.replace(/\/$/, ''),
      nodes: file.nodes.map((node) => ({ id: node.id, url: node.url.replace(/\/$/, '') })),
      databaseUrl: fromEnv(file.databaseUrlEnv, 'databaseUrlEnv'),
      adminToken: fromEnv(file.adminTokenEnv, 'adminTokenEnv'),
      flagsEnv: name,
      control: file.control ? shellControl(file.control, base) : undefined,
      watchTargetHost: file.watchTargetHost,
    },
    flags,
    push: file.push && {
      redisUrl: file.push.redisUrlEnv
        ? fromEnv(file.push.redisUrlEnv, 'push.redisUrlEnv')
        : file.push.redisUrl!,
      keyPrefix: file.push.keyPrefix,
      ...(file.push.clusterNodes === undefined ? {} : { clusterNodes: file.push.clusterNodes }),
    },
    requirePassedIn: file.requirePassedIn,
    ...(file.prometheusUrl ? { prometheusUrl: file.prometheusUrl.replace(/\/$/, '') } : {}),
  };
}

/**
 * Only the database of environment `name` (its file's `databaseUrlEnv`, or the local cluster's): for what
 * reads Postgres alone, like the audit verifier, which needs neither the admin token nor the flag service's.
 */
export function environmentDatabaseUrl(name: string, cwd = process.cwd()): string {
  if (!ENVIRONMENT_NAME.test(name)) throw new UsageError(`bad environment name "${name}"`);
  const path = join(cwd, 'environments', `${name}.json`);
  if (existsSync(path)) return fromEnv(readEnvironmentFile(path).databaseUrlEnv, 'databaseUrlEnv');
  return resolveEnvironment(name, cwd).target.databaseUrl;
}

/** The local cluster as an environment: its nodes are this machine's processes, so it can crash them. */
export function localEnvironment(cwd: string): Environment | undefined {
  const cluster = readCluster(cwd);
  if (!cluster) return undefined;
  const redis = localClusterRedis(cluster);
  return {
    name: cluster.flagsEnv,
    phase: cluster.phase,
    target: {
      lbUrl: cluster.lb.url,
      nodes: cluster.nodes.map(({ id, url }) => ({ id, url })),
      databaseUrl: cluster.databaseUrl,
      adminToken: cluster.adminToken,
      flagsEnv: cluster.flagsEnv,
      control: {
        kill: (node) => stopNode(cwd, node, 'SIGKILL'),
        stop: (node) => stopNode(cwd, node, 'SIGTERM'),
        start: (node) => startNode(cwd, node),
      },
      watchTargetHost: '127.0.0.1',
    },
    flags: fileFlagsAccess(cluster.flagsDir, cluster.flagsEnv),
    push: { redisUrl: redis.url, clusterNodes: redis.clusterNodes, keyPrefix: cluster.redisKeyPrefix },
  };
}

/**
 * `--env E`: `environments/E.json` in the working directory when there is one, else the local cluster,
 * whose environment must then be E. Without `--env`: the local cluster.
 */
export function resolveEnvironment(name: string | undefined, cwd = process.cwd()): Environment {
  if (name !== undefined) {
    if (!ENVIRONMENT_NAME.test(name)) throw new UsageError(`bad environment name "${name}"`);
    const path = join(cwd, 'environments', `${name}.json`);
    if (existsSync(path)) return loadEnvironmentFile(path, name);
  }
  const local = localEnvironment(cwd);
  if (!local) {
    throw new Error(
      name === undefined
        ? 'no local cluster here (.workbench/cluster.json): start one with "workbench up", or pass --env E'
        : `no environment "${name}": neither environments/${name}.json nor a local cluster of that environment here (${knownEnvironmentsLine(cwd)})`,
    );
  }
  if (name !== undefined && local.name !== name) {
    throw new UsageError(
      `no environment "${name}": no environments/${name}.json here, and the local cluster runs environment "${local.name}", not "${name}" (${knownEnvironmentsLine(cwd)})`,
    );
  }
  return local;
}

/**
 * The environments `--env` can name from `cwd`: each `environments/*.json` and the local cluster's (its
 * `flagsEnv`), for the message of a wrong `--env`.
 */
export function knownEnvironments(cwd = process.cwd()): { files: string[]; localCluster?: string } {
  const folder = join(cwd, 'environments');
  const files = existsSync(folder)
    ? readdirSync(folder)
        .filter((file) => file.endsWith('.json') && ENVIRONMENT_NAME.test(file.slice(0, -'.json'.length)))
        .map((file) => file.slice(0, -'.json'.length))
        .sort()
    : [];
  return { files, localCluster: readCluster(cwd)?.flagsEnv };
}

/** "environments here: staging, prod (environments/); local (the local cluster)", or that there are none. */
export function knownEnvironmentsLine(cwd = process.cwd()): string {
  const { files, localCluster } = knownEnvironments(cwd);
  const parts = [
    ...(files.length > 0 ? [`${files.join(', ')} (environments/)`] : []),
    ...(localCluster ? [`${localCluster} (the local cluster)`] : []),
  ];
  return parts.length > 0
    ? `environments here: ${parts.join('; ')}`
    : 'no environments/*.json and no local cluster here';
}
