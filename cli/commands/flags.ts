/**
 * `workbench flags list|set|seed`: read and flip an environment's flags, whichever provider it uses.
 * `set` changes the provider, reads it back, records the change in the audit chain (once), and pushes
 * "refresh now" to the environment's nodes; `seed` does that for every flag of a phase's preset (Unleash
 * only: it creates the toggles a fresh Unleash lacks); `list` shows what the provider says and what each
 * live node acts on.
 */
import { existsSync, readdirSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { createPool, type Pool } from '../../broker/db/pool.js';
import { flagChangeLedger } from '../../broker/flag-changes.js';
import { packageRoot } from '../../broker/paths.js';
import { parseRedisClusterNodes, type RedisClusterNode } from '../../broker/redis/cluster-nodes.js';
import { type FlagsAccess, fileFlagsAccess, unleashFlagsAccess } from '../../flags/access.js';
import { changeFlag } from '../../flags/changes.js';
import { defaultFlagsDir, flagsFile, readFlagsFile } from '../../flags/file-store.js';
import { FLAG_KEYS, FLAGS, type FlagValues, isFlagKey } from '../../flags/registry.js';
import { UnknownUnleashEnvironmentError, type UnleashAdminOptions } from '../../flags/unleash-admin.js';
import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import {
  clusterFlagsDir,
  databaseUrlFor,
  pushRedisUrlsFor,
  redisClusterNodesFor,
  redisFor,
} from '../database.js';

const OPTIONS = {
  env: {
    type: 'string',
    value: 'E',
    help: 'the environment (required): environments/E.json, else the options below',
  },
  provider: {
    type: 'string',
    value: 'file|unleash',
    help: 'the flag provider (default: FLAGS_PROVIDER, else file)',
  },
  'flags-dir': {
    type: 'string',
    value: 'DIR',
    help: "the file provider's folder (default: FLAGS_DIR, the local cluster's, flags/environments)",
  },
  'unleash-url': { type: 'string', value: 'URL', help: "Unleash's URL (default: UNLEASH_URL)" },
  'unleash-token': {
    type: 'string',
    value: 'T',
    help: "Unleash's admin token (default: UNLEASH_ADMIN_TOKEN)",
  },
  'unleash-environment': {
    type: 'string',
    value: 'NAME',
    help: 'the Unleash environment (default: UNLEASH_ENVIRONMENT, else development)',
  },
  phase: { type: 'string', value: 'N', help: 'seed: the phase whose preset to write (required for seed)' },
  actor: {
    type: 'string',
    value: 'NAME',
    help: 'set, seed: who changes it, as audited (default: WORKBENCH_ACTOR, the user)',
  },
  json: { type: 'boolean', help: 'list: one JSON document instead of the table' },
  'database-url': {
    type: 'string',
    value: 'URL',
    help: "the audit database (default: DATABASE_URL, the local cluster's)",
  },
  'redis-url': {
    type: 'string',
    value: 'URL',
    help: 'where "refresh now" is pushed (default: REDIS_URL, the local cluster\'s)',
  },
} as const satisfies OptionSpec;

export const flagsCommand = defineCommand({
  synopsis: [
    'flags list --env E [--json]',
    'flags set KEY on|off|shadow --env E [--actor NAME]',
    'flags seed --env E --phase N [--actor NAME]',
  ],
  about: `list: each flag, the provider's value and what every live node acts on.
set: flip a flag (file or Unleash provider), read it back, audit it, push "refresh now" to the nodes.
seed: write phase N's flag preset into E's provider (Unleash: creating missing toggles), each flag read
back and each change audited. Exit 2 on a wrong call (an unknown flag, environment or phase), writing nothing.`,
  options: OPTIONS,
  run: runFlagsCommand,
});

type Values = Parsed<typeof OPTIONS>['values'];

async function providerFor(values: Values, environment: string, fallbackKind = 'file'): Promise<FlagsAccess> {
  const kind = values.provider ?? process.env.FLAGS_PROVIDER ?? fallbackKind;
  if (kind === 'file') {
    const dir =
      values['flags-dir'] ?? process.env.FLAGS_DIR ?? clusterFlagsDir() ?? defaultFlagsDir(packageRoot());
    if (!existsSync(flagsFile(dir, environment))) {
      // A wrong --env, most likely: say which environments there are (the message's module loads only here).
      const { knownEnvironmentsLine } = await import('../environments/environment.js');
      const inDir = existsSync(dir)
        ? readdirSync(dir)
            .filter((file) => file.endsWith('.json'))
            .map((file) => file.slice(0, -'.json'.length))
        : [];
      throw new UsageError(
        `no environment "${environment}": no environments/${environment}.json here, and the file provider has no ${flagsFile(dir, environment)} (${knownEnvironmentsLine()}; flags files in ${dir}: ${inDir.join(', ') || 'none'})`,
      );
    }
    return fileFlagsAccess(dir, environment);
  }
  if (kind !== 'unleash') throw new UsageError(`--provider must be "file" or "unleash", got "${kind}"`);
  const url = values['unleash-url'] ?? process.env.UNLEASH_URL;
  if (!url) throw new UsageError('the unleash provider needs --unleash-url (or UNLEASH_URL)');
  const admin: UnleashAdminOptions = {
    url,
    token: values['unleash-token'] ?? process.env.UNLEASH_ADMIN_TOKEN,
    environment: values['unleash-environment'] ?? process.env.UNLEASH_ENVIRONMENT ?? 'development',
  };
  return unleashFlagsAccess(admin);
}

/**
 * Where an environment's flags, audit and push go: its `environments/E.json` when there is one (its provider,
 * database and Redis), else the options, the variables and the local cluster as before.
 */
async function accessFor(values: Values, environment: string, fallbackKind = 'file') {
  const file = join(process.cwd(), 'environments', `${environment}.json`);
  if (existsSync(file)) {
    // Loaded only here: the environment module (zod, the local cluster's code) is most of what a flip
    // would otherwise load before it starts.
    const { loadEnvironmentFile } = await import('../environments/environment.js');
    const described = loadEnvironmentFile(file, environment);
    return {
      provider: described.flags,
      databaseUrl: described.target.databaseUrl,
      push: described.push,
    };
  }
  return {
    provider: await providerFor(values, environment, fallbackKind),
    databaseUrl: databaseUrlFor(values['database-url']),
    push: {
      ...(({ url, keyPrefix }) => ({ redisUrl: url, keyPrefix }))(redisFor(values['redis-url'])),
      clusterNodes: clusterNodesFor(values['redis-url']),
      // Phase 4's simulation: every region's own Redis, so no region waits for its poll.
      otherRedisUrls: pushRedisUrlsFor(values['redis-url']).slice(1),
    },
  };
}

/**
 * REDIS_CLUSTER_NODES, parsed as the broker parses it (the nodes listen on a Redis Cluster's sharded
 * channel), else the local cluster's Redis Cluster.
 */
function clusterNodesFor(redisUrlOption: string | undefined) {
  const raw = redisClusterNodesFor(redisUrlOption);
  if (raw === undefined) return undefined;
  try {
    return parseRedisClusterNodes(raw);
  } catch (error) {
    throw new UsageError(`REDIS_CLUSTER_NODES: ${(error as Error).message}`);
  }
}

async function runFlagsCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  const [action, ...rest] = positionals;
  const environment = values.env;
  if (action !== 'list' && action !== 'set' && action !== 'seed')
    throw new UsageError(`unknown flags action "${action ?? ''}" (expected list, set or seed)`);
  if (!environment) throw new UsageError(`flags ${action} needs --env E`);
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(environment))
    throw new UsageError(`bad environment name "${environment}"`);
  try {
    if (action === 'list') return await list(values, environment, rest);
    if (action === 'set') return await set(values, environment, rest);
    return await seed(values, environment, rest);
  } catch (error) {
    // Unleash has no such environment: the command names one that does not exist (exit 2, nothing written).
    if (error instanceof UnknownUnleashEnvironmentError) throw new UsageError(error.message);
    throw error;
  }
}

/**
 * "Refresh now" to the environment's nodes: on its Redis, and on every other Redis its nodes listen on
 * (each region's, in phase 4's simulation), the subscribers counted together; undefined when none of them
 * answered. ioredis is loaded here, not at start: it is the largest import of the command, and `flags
 * list` never pushes.
 */
async function pushRefresh(
  push: {
    redisUrl: string;
    keyPrefix: string;
    clusterNodes?: RedisClusterNode[] | undefined;
    otherRedisUrls?: string[];
  },
  environment: string,
  reason: object,
): Promise<number | undefined> {
  const { pushRefreshOnce } = await import('../../broker/flag-refresh.js');
  const { otherRedisUrls = [], ...first } = push;
  const counts = await Promise.all([
    pushRefreshOnce(first, environment, reason),
    ...otherRedisUrls.map((redisUrl) =>
      pushRefreshOnce({ redisUrl, keyPrefix: push.keyPrefix }, environment, reason),
    ),
  ]);
  const answered = counts.filter((n): n is number => n !== undefined);
  return answered.length === 0 ? undefined : answered.reduce((sum, n) => sum + n, 0);
}

function pushedLine(push: unknown, nodes: number | undefined, environment: string): string {
  return !push
    ? 'not pushed (the environment has no push channel; nodes pick it up at their next poll)'
    : nodes === undefined
      ? 'not pushed (Redis unreachable; nodes pick it up at their next poll)'
      : `pushed to ${nodes} subscriber${nodes === 1 ? '' : 's'} (nodes of ${environment})`;
}

function actorOf(values: Values): string {
  return values.actor ?? process.env.WORKBENCH_ACTOR ?? userInfo().username;
}

async function set(values: Values, environment: string, args: string[]): Promise<number> {
  const [key, state, ...extra] = args;
  if (!key || !state) throw new UsageError('usage: flags set KEY on|off|shadow --env E');
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  if (!isFlagKey(key)) throw new UsageError(`unknown flag "${key}"; known flags: ${FLAG_KEYS.join(', ')}`);
  if (state !== 'on' && state !== 'off' && state !== 'shadow')
    throw new UsageError(`flag value must be "on", "off" or "shadow", got "${state}"`);
  const on = state === 'on';
  const shadow = state === 'shadow';
  const { provider, databaseUrl, push } = await accessFor(values, environment);

  const pool = createPool(databaseUrl, {
    max: 2,
    applicationName: 'workbench-flags',
  });
  try {
    const actor = actorOf(values);
    const before = (await provider.readShadow()).includes(key) ? 'shadow' : undefined;
    const { changed, from } = await changeFlag(flagChangeLedger(pool), provider, {
      environment,
      flag: key,
      value: on,
      shadow,
      actor,
    });
    const nodes = push ? await pushRefresh(push, environment, { flag: key, value: on }) : undefined;
    const pushed = pushedLine(push, nodes, environment);
    console.log(
      changed
        ? `${key}: ${before ?? (from ? 'on' : 'off')} → ${state} in ${environment} (${provider.describe}); audited as ${actor}; ${pushed}`
        : `${key} is already ${state} in ${environment}; nothing to audit; ${pushed}`,
    );
    return 0;
  } finally {
    await pool.end();
  }
}

/** The phase presets shipped with the project: `phases/phaseN/flags/phaseN.json`, by N. */
function phasePresetFile(phase: number): string {
  return join(packageRoot(), 'phases', `phase${phase}`, 'flags', `phase${phase}.json`);
}

function knownPhases(): number[] {
  const names = readdirSync(join(packageRoot(), 'phases'), { withFileTypes: true });
  return names
    .filter((entry) => entry.isDirectory() && /^phase\d+$/.test(entry.name))
    .map((entry) => Number(entry.name.slice('phase'.length)))
    .filter((phase) => existsSync(phasePresetFile(phase)))
    .sort((a, b) => a - b);
}

function presetOf(phaseOption: string | undefined): { phase: number; values: FlagValues } {
  if (phaseOption === undefined) throw new UsageError('flags seed needs --phase N');
  const phases = knownPhases();
  const phase = /^\d{1,3}$/.test(phaseOption) ? Number(phaseOption) : Number.NaN;
  if (!phases.includes(phase))
    throw new UsageError(`unknown phase "${phaseOption}" (phases with a preset: ${phases.join(', ')})`);
  return { phase, values: readFlagsFile(phasePresetFile(phase)) };
}

/**
 * Writes a phase's preset into the environment's Unleash (creating the toggles a fresh Unleash lacks),
 * each flag read back and audited once, then pushes "refresh now". Everything is checked before the first
 * write: the phase, the environment, Unleash (URL, token, environment) and the database.
 */
async function seed(values: Values, environment: string, args: string[]): Promise<number> {
  if (args.length > 0) throw new UsageError(`unexpected argument "${args[0]}"`);
  const preset = presetOf(values.phase);
  const hasFile = existsSync(join(process.cwd(), 'environments', `${environment}.json`));
  const urlGiven = values['unleash-url'] ?? process.env.UNLEASH_URL;
  if (!hasFile && !urlGiven)
    throw new UsageError(
      `unknown environment "${environment}": no environments/${environment}.json here, and no --unleash-url (or UNLEASH_URL)`,
    );
  if (!hasFile && (values.provider ?? 'unleash') !== 'unleash')
    throw new UsageError('flags seed writes Unleash: --provider must be "unleash" (or left out)');
  const { provider, databaseUrl, push } = await accessFor(values, environment, 'unleash');
  if (provider.kind !== 'unleash')
    throw new UsageError(
      `environment "${environment}" uses the file provider (${provider.describe}); seed writes Unleash`,
    );
  await provider.read(); // Unleash reachable, the token valid, the environment known: or nothing is written
  const pool = createPool(databaseUrl, { max: 2, applicationName: 'workbench-flags' });
  try {
    await checkDatabase(pool, databaseUrl);
    const actor = actorOf(values);
    let changes = 0;
    for (const flag of FLAG_KEYS) {
      const value = preset.values[flag];
      const { changed, from } = await changeFlag(flagChangeLedger(pool), provider, {
        environment,
        flag,
        value,
        actor,
      });
      if (changed) changes += 1;
      const show = (on: boolean) => (on ? 'on' : 'off');
      console.log(changed ? `${flag}: ${show(from)} → ${show(value)}` : `${flag}: ${show(value)} (already)`);
    }
    const nodes = push ? await pushRefresh(push, environment, { phase: preset.phase }) : undefined;
    console.log(
      `seeded phase ${preset.phase}'s preset into ${provider.describe} for ${environment}: ${changes} change${changes === 1 ? '' : 's'} audited as ${actor}; ${pushedLine(push, nodes, environment)}`,
    );
    return 0;
  } finally {
    await pool.end();
  }
}

async function checkDatabase(pool: Pool, databaseUrl: string): Promise<void> {
  try {
    await pool.query('SELECT 1 FROM flag_states LIMIT 1');
  } catch (error) {
    const where = new URL(databaseUrl).host;
    throw new Error(
      `the audit database at ${where} is not usable (${(error as Error).message}); nothing written`,
    );
  }
}

interface NodeRow {
  id: string;
  heartbeatAt: Date;
  info: {
    environment?: string;
    flags?: { source?: string; flags?: Record<string, { value: boolean; acting: boolean }> };
  };
}

async function list(values: Values, environment: string, args: string[]): Promise<number> {
  if (args.length > 0) throw new UsageError(`unexpected argument "${args[0]}"`);
  const access = await accessFor(values, environment);
  const desired = await access.provider.read();
  const pool = createPool(access.databaseUrl, {
    max: 2,
    applicationName: 'workbench-flags',
  });
  let nodes: NodeRow[];
  try {
    // Live nodes of the environment: not stopped, heartbeat within the last minute.
    const result = await pool.query<NodeRow>(
      `SELECT id, heartbeat_at AS "heartbeatAt", info FROM nodes
        WHERE stopped_at IS NULL AND heartbeat_at > now() - interval '1 minute' AND info->>'environment' = $1
        ORDER BY id`,
      [environment],
    );
    nodes = result.rows;
  } finally {
    await pool.end();
  }
  const rows = FLAGS.map((flag) => {
    const perNode = Object.fromEntries(
      nodes.map((node) => [node.id, node.info.flags?.flags?.[flag.key] ?? { value: false, acting: false }]),
    );
    const disagree = Object.values(perNode).some(
      (state) => state.value !== desired[flag.key] || state.acting !== state.value,
    );
    return {
      flag: flag.key,
      row: flag.row,
      phase: flag.phase,
      desired: desired[flag.key],
      nodes: perNode,
      disagree,
    };
  });
  if (values.json) {
    console.log(JSON.stringify({ environment, nodes: nodes.map((n) => n.id), flags: rows }, null, 2));
    return 0;
  }
  const show = (on: boolean) => (on ? 'on' : 'off');
  const header = ['FLAG', 'PHASE', 'DESIRED', ...nodes.map((n) => n.id), ''];
  const table = rows.map((r) => [
    r.flag,
    String(r.phase),
    show(r.desired),
    // "on" = provider says on and the node acts on it; "on (not acting)" = no shared implementation yet
    ...nodes.map((n) => {
      const state = r.nodes[n.id]!;
      return state.value === state.acting
        ? show(state.value)
        : `${show(state.value)} (acting ${show(state.acting)})`;
    }),
    r.disagree ? 'DISAGREE' : '',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i]!.length)));
  for (const line of [header, ...table])
    console.log(
      line
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    );
  if (nodes.length === 0) console.log(`(no live node reports environment "${environment}")`);
  return 0;
}
